// Command adaptbench compares admission strategies on a synthetic backend of
// known capacity, shared by worker processes (see package adaptbench):
//
//	go run ./internal/adaptbench/cmd/adaptbench -store redis -out /tmp/adaptive.md -png /tmp/adaptive.png
//
// It prints a markdown table to stdout, and writes it to -out and a plot to
// -png. Redis is at $KEYCAP_REDIS_ADDR (default 127.0.0.1:6379).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/keycap/keycap/internal/adaptbench"
)

func main() {
	adaptbench.MaybeRunWorker() // a worker process: runs and exits
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "adaptbench:", err)
		os.Exit(1)
	}
}

func run() error {
	scale := flag.Float64("scale", 1, "phase length, as a multiple of 8 s")
	cfg := adaptbench.DefaultConfig(1)
	flag.StringVar(&cfg.Store, "store", cfg.Store, "the store the keycap strategies share: redis")
	out := flag.String("out", "", "write the markdown table to this file too")
	png := flag.String("png", "docs/adaptive.png", "write the plot to this PNG (\"\": none)")
	strategies := flag.String("strategies", strings.Join(cfg.Strategies, ","), "the strategies to run, in order")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds; each rotates the order by one")
	flag.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "C0, the backend's initial capacity")
	flag.DurationVar(&cfg.Service, "service", cfg.Service, "S, the base service time")
	slo := flag.Duration("slo", 0, "the SLO (0: 2.5×S)")
	wait := flag.Duration("wait", 0, "how long a request may wait for admission (0: S)")
	flag.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of arrivals and service times")
	flag.Parse()

	cfg.Phases = adaptbench.Schedule(cfg.Capacity, *scale)
	cfg.SLO, cfg.Wait = cfg.Service*5/2, cfg.Service
	if *slo > 0 {
		cfg.SLO = *slo
	}
	if *wait > 0 {
		cfg.Wait = *wait
	}
	cfg.Strategies = strings.Split(*strategies, ",")
	if a := os.Getenv("KEYCAP_REDIS_ADDR"); a != "" {
		cfg.RedisAddr = a
	}
	cfg.Progress, cfg.Stderr = os.Stderr, os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	t0 := time.Now()
	rep, err := adaptbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.Markdown(os.Stdout); err != nil {
		return err
	}
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		if err := rep.Markdown(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if *png != "" {
		if err := rep.WritePNG(*png); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "done in %.0fs\n", time.Since(t0).Seconds())
	return nil
}
