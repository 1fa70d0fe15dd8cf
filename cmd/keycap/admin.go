package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

// adminFlags are the flags every admin command takes.
type adminFlags struct {
	addr, token *string
}

func newAdminFlags(fs *flag.FlagSet) adminFlags {
	def := os.Getenv("KEYCAP_ADMIN_URL")
	if def == "" {
		def = "http://127.0.0.1:9091"
	}
	return adminFlags{
		addr:  fs.String("admin", def, "the gateway's admin listener (or KEYCAP_ADMIN_URL)"),
		token: fs.String("token", os.Getenv("KEYCAP_ADMIN_TOKEN"), "the admin token (or KEYCAP_ADMIN_TOKEN)"),
	}
}

var adminClient = &http.Client{Timeout: 10 * time.Second}

// call sends one admin API request and decodes its JSON answer into out.
func (a adminFlags) call(method, path string, body, out any) error {
	if *a.token == "" {
		return errors.New("no admin token: give -token or set KEYCAP_ADMIN_TOKEN")
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimRight(*a.addr, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+*a.token)
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %s", method, path, e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// override runs keycap override set|reset|list.
func override(args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Print(overrideUsage)
		return nil
	}
	sub, args := args[0], args[1:]
	fs := newFlags("override " + sub)
	a := newAdminFlags(fs)
	route := fs.String("route", "", "the route whose key to override")
	app := fs.String("app", "", "or the Pusher app whose user to override")
	key := fs.String("key", "", "the key: header:X-User=alice (or X-User=alice), claim:sub=42, ip:203.0.113.7")
	maxN := fs.Int("max", -1, "the key's max (set: 0 or more)")
	share := fs.Int("share", 0, "the key's share of its parent (set: 1 or more)")
	ttl := fs.Duration("ttl", 0, "how long the override lasts (0: until reset)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("override %s: unexpected argument %q", sub, fs.Arg(0))
	}
	switch sub {
	case "set":
		if *maxN < 0 && *share == 0 {
			return errors.New("override set: give -max N (0 refuses every request of the key) or -share N, or both")
		}
		req := gateway.OverrideRequest{Route: *route, App: *app, Key: *key, Share: *share}
		if *maxN >= 0 {
			req.Max = maxN
		}
		if *ttl > 0 {
			req.TTL = ttl.String()
		}
		if err := a.call(http.MethodPut, "/admin/api/overrides", req, nil); err != nil {
			return err
		}
		fmt.Println("override set")
		return nil
	case "reset":
		q := url.Values{"key": {*key}}
		if *route != "" {
			q.Set("route", *route)
		}
		if *app != "" {
			q.Set("app", *app)
		}
		if err := a.call(http.MethodDelete, "/admin/api/overrides?"+q.Encode(), nil, nil); err != nil {
			return err
		}
		fmt.Println("override reset: the configured values apply")
		return nil
	case "list":
		var list []gateway.OverrideView
		if err := a.call(http.MethodGet, "/admin/api/overrides", nil, &list); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FAMILY\tNAME\tKEY\tMAX\tSHARE\tEXPIRES IN")
		for _, o := range list {
			m, sh, exp := "-", "-", "never"
			if o.Max != nil {
				m = fmt.Sprint(*o.Max)
			}
			if o.Share > 0 {
				sh = fmt.Sprint(o.Share)
			}
			if o.TTL > 0 {
				exp = (time.Duration(o.TTL * float64(time.Second))).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%q\t%s\t%s\t%s\n", o.Family, o.Name, o.Key, m, sh, exp)
		}
		return tw.Flush()
	}
	return fmt.Errorf("override: unknown subcommand %q: set, reset or list", sub)
}

const overrideUsage = `keycap override: change one key's limit on every gateway of the store, live.

  keycap override set -route api -key header:X-User=alice -max 20 [-share 3] [-ttl 2h]
  keycap override reset -route api -key header:X-User=alice
  keycap override list

-app APP instead of -route sets a Pusher user's connection cap. Each takes
-admin URL (default http://127.0.0.1:9091, or KEYCAP_ADMIN_URL) and -token
(or KEYCAP_ADMIN_TOKEN): the gateway's admin_api.token.
`

// inspect prints what the gateway's admin page shows: the store's figures
// now, and the last 15 minutes of every gateway given to -admin (their
// histories added up); with -key, one key's holders and history.
func inspect(args []string) error {
	fs := newFlags("inspect")
	a := newAdminFlags(fs)
	asJSON := fs.Bool("json", false, "print the summary and the history as JSON")
	route := fs.String("route", "", "only this route's limits (with -key: the key's route)")
	app := fs.String("app", "", "with -key: the Pusher app whose user to show")
	key := fs.String("key", "", "show one key: its holders on every gateway, its refusals here")
	search := fs.String("q", "", "only keys holding this text")
	sort := fs.String("sort", "refused", "order of the keys: "+strings.Join(gateway.Sorts, ", "))
	n := fs.Int("n", 10, "keys per limit (at most 1000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("inspect: unexpected argument %q", fs.Arg(0))
	}
	addrs := strings.Split(*a.addr, ",")
	first := adminFlags{addr: &addrs[0], token: a.token}
	if *key != "" {
		return inspectKey(first, *route, *app, *key, *asJSON)
	}
	var s gateway.Summary
	if err := first.call(http.MethodGet, "/admin/api/summary", nil, &s); err != nil {
		return err
	}
	q := url.Values{"sort": {*sort}, "n": {fmt.Sprint(*n)}}
	if *route != "" {
		q.Set("route", *route)
	}
	if *search != "" {
		q.Set("q", *search)
	}
	var hs []gateway.History
	for _, addr := range addrs {
		var h gateway.History
		if err := (adminFlags{addr: &addr, token: a.token}).call(http.MethodGet, "/admin/api/history?"+q.Encode(), nil, &h); err != nil {
			return err
		}
		hs = append(hs, h)
	}
	h := gateway.MergeHistories(*sort, *n, hs...)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Summary gateway.Summary `json:"summary"`
			History gateway.History `json:"history"`
		}{s, h})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node %s at %s\n\n", s.Node, s.At.Format(time.RFC3339))
	fmt.Fprintln(tw, "POOL\tKEY\tMAX\tKEYS\tIN USE\tWAITING\tAT CAP\tREFUSALS/S\tBUSIEST")
	for _, l := range s.Limits {
		if *route != "" && !slices.Contains(l.Routes, *route) {
			continue
		}
		name := l.Pool
		if l.Shadow {
			name += " (shadow)"
		}
		var top []string
		for _, k := range l.Busiest[:min(len(l.Busiest), 3)] {
			top = append(top, fmt.Sprintf("%s %d", k.Key, k.Held))
		}
		src := l.Source
		if src == "" {
			src = "(not seen here)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s\n", name, src, l.Max, l.Keys, l.InUse, l.Waiting, l.AtCap, l.PerSecond, strings.Join(top, ", "))
	}
	if len(h.Routes) > 0 {
		fmt.Fprintf(tw, "\nLAST 15 MIN (%s)\tREQUESTS\tREFUSED\t502/503/504\tUPSTREAM 5XX\n", h.Node)
		for _, r := range h.Routes {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", r.Route, sum(r.Requests), sum(r.Refused), sum(r.Failed), sum(r.Upstream))
		}
	}
	for _, l := range h.Limits {
		if len(l.Keys) == 0 {
			continue
		}
		name := l.Pool + " " + l.Source
		if l.Shadow {
			name += " (shadow)"
		}
		fmt.Fprintf(tw, "\n%s: %d REFUSED IN 15 MIN\tREFUSED\tLAST REFUSED\tSLOT-TIME\n", name, l.RefusedTotal)
		for _, k := range l.Keys {
			last := "-"
			if k.LastRefused != nil {
				last = time.Since(*k.LastRefused).Round(time.Second).String() + " ago"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k.Key, k.Refused, last, (time.Duration(k.SlotSeconds * float64(time.Second))).Round(time.Millisecond))
		}
	}
	if len(s.Apps) > 0 {
		fmt.Fprintln(tw, "\nAPP\tCAP PER USER\tUSERS\tCONNECTIONS")
		for _, ap := range s.Apps {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", ap.App, ap.Cap, ap.Users, ap.Connections)
		}
	}
	if len(s.Totals) > 0 {
		fmt.Fprintln(tw, "\nADAPTIVE TOTAL\tTOTAL\tFLOOR-CEILING\tWHY\tLATENCY\tNO-LOAD\tIN FLIGHT\tDONE\tOVERLOADS")
		for _, t := range s.Totals {
			name := t.Parent
			if t.Shadow {
				name += " (shadow)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d-%d\t%s\t%s\t%s\t%.1f\t%d\t%d\n", name, t.Total, t.Floor, t.Ceiling, t.Reason,
				time.Duration(t.Latency*float64(time.Second)).Round(time.Microsecond), time.Duration(t.Baseline*float64(time.Second)).Round(time.Microsecond),
				t.InFlight, t.Completed, t.Overloads)
		}
	}
	if len(s.Pauses) > 0 {
		fmt.Fprintln(tw, "\nPAUSE\tKIND\tLEFT")
		for _, p := range s.Pauses {
			kind := "pause"
			if p.Pace {
				kind = "pace"
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1fs\n", p.ID, kind, p.Left)
		}
	}
	for _, p := range s.Problems {
		fmt.Fprintln(tw, "problem:", p)
	}
	return tw.Flush()
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// inspectKey prints one key: its pools' holders, from the store, and its
// history on the gateway asked.
func inspectKey(a adminFlags, route, app, key string, asJSON bool) error {
	q := url.Values{"key": {key}}
	if route != "" {
		q.Set("route", route)
	}
	if app != "" {
		q.Set("app", app)
	}
	var rep gateway.KeyReport
	if err := a.call(http.MethodGet, "/admin/api/key?"+q.Encode(), nil, &rep); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key %s\n", rep.Key)
	for _, p := range rep.Pools {
		name := p.Pool
		if p.Shadow {
			name += " (shadow)"
		}
		fmt.Fprintf(tw, "\n%s: %d / %d held\n", name, p.Held, p.Max)
		fmt.Fprintln(tw, "HOLDER\tWEIGHT\tAGE\tEXPIRES IN\tGATEWAY\tREQUEST")
		for _, h := range p.Holders {
			fmt.Fprintf(tw, "%s\t%d\t%.1fs\t%.1fs\t%s\t%s\n", h.Owner, h.Weight, h.Age, h.Expires, h.Node, h.Label)
		}
		if len(p.Waiting) > 0 {
			fmt.Fprintf(tw, "%d waiting\n", len(p.Waiting))
		}
	}
	for _, k := range rep.History {
		fmt.Fprintf(tw, "\nlast 15 min here: %d refused, %s of slot-time\n", k.Refused, (time.Duration(k.SlotSeconds * float64(time.Second))).Round(time.Millisecond))
	}
	return tw.Flush()
}
