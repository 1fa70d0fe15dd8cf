// Command holder is a client process of the safety workload: it serves the
// store calls a safety.Process sends on its stdin, through a store of its
// own (Redis or PostgreSQL), and answers on its stdout. The checker stops
// it (SIGSTOP) past its leases' TTL and starts it again (SIGCONT), as a
// paused holder is.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/internal/safety"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

func main() {
	addr := flag.String("redis", "", "the Redis address")
	prefix := flag.String("prefix", "", "the Redis store's key prefix")
	pg := flag.String("postgres", "", "the PostgreSQL URL (instead of -redis)")
	schema := flag.String("schema", "", "the PostgreSQL store's schema")
	flag.Parse()
	s, closeStore, err := open(*addr, *prefix, *pg, *schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(2)
	}
	err = serve(s, os.Stdin, os.Stdout)
	closeStore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
}

// open opens the store the flags name: Redis at addr, or PostgreSQL at pg.
func open(addr, prefix, pg, schema string) (store.Store, func(), error) {
	switch {
	case addr != "" && pg == "":
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 16})
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		return s, func() { _ = c.Close() }, err
	case pg != "" && addr == "":
		cfg, err := pgxpool.ParseConfig(pg)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, nil, err
		}
		s, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithTimeout(time.Second))
		return s, pool.Close, err
	}
	return nil, nil, errors.New("give one of -redis and -postgres")
}

// serve answers each request of in on out, concurrently, until in ends.
func serve(s store.Store, in io.Reader, out io.Writer) error {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req safety.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("a request: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := call(s, req)
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(rep) // a parent gone is the end: in ends too
		}()
	}
	wg.Wait()
	return sc.Err()
}

func call(s store.Store, req safety.Request) safety.Reply {
	ctx, cancel := context.WithDeadline(context.Background(), req.Deadline)
	defer cancel()
	rep := safety.Reply{ID: req.ID}
	var err error
	switch req.Call {
	case "acquire":
		rep.Grant, err = s.Acquire(ctx, req.Pool, req.Owner, req.Demand)
	case "release":
		rep.Kept, err = s.Release(ctx, req.Pool, req.Owner, req.Demand, req.Leave)
	case "renew":
		batch := make([]store.Renewal, len(req.Batch))
		for i, r := range req.Batch {
			batch[i] = store.Renewal{Pool: r.Pool, Owner: r.Owner, TTL: r.TTL, Weight: r.Weight, Parent: r.Parent}
		}
		err = s.Renew(ctx, batch)
		rep.Batch = make([]safety.Renewal, len(batch))
		for i, r := range batch {
			rep.Batch[i] = req.Batch[i]
			rep.Batch[i].Lost = r.Lost
			if r.Err != nil {
				rep.Batch[i].Err = r.Err.Error()
			}
		}
	default:
		err = errors.New("no call " + req.Call)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	return rep
}
