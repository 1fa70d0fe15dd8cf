// Package otelobserver exports keycap's events as OpenTelemetry metrics and
// span events: one keycap.Observer for every front door — HTTP requests,
// jobs, connections and API pauses — to pass to keycap.WithObserver. It is
// promobserver's counterpart for OpenTelemetry: it counts the same events,
// and a few more (store recoveries, outage lengths), under names of
// OpenTelemetry's style, which an OpenTelemetry Prometheus exporter does not
// turn into promobserver's (keycap.slot_acquired_count is not
// keycap_slots_acquired_total). Use either, or both with keycap.Observers.
//
//	obs, err := otelobserver.New(&otelobserver.Config{MeterProvider: mp}) // nil: the global providers
//	limiter, err := keycap.NewLimiter(store, keycap.WithObserver(obs))
//
// It follows the conventions of otelriver (River's OpenTelemetry
// middleware): a Config with a MeterProvider that defaults to the global
// one (no TracerProvider: span events go on the caller's span, whichever
// provider started it), an instrumentation scope named after the
// package, instruments named "keycap." and snake case, counts in annotated
// units ("{slot}"), durations as float64 histograms in seconds unless
// Config.DurationUnit is "ms", and attribute keys without a prefix.
//
// Slot instruments have the attributes family ("app" for HTTP and the
// application's own limits, "job", "conn"), limit (the limit's name), max
// and shadow (true for a shadow limit, keycap.Spec.Shadow), never the key: keys are
// unbounded (users, IPs, tenants), would explode the number of series, and
// may be personal data. Limit names come from code (limiter names, job
// kinds, Pusher apps), so they are few. A lease of several slots
// (keycap.Spec.Weight) counts once.
//
//	keycap.slot_acquired_count   {slot}   counter   slots granted (connections admitted)
//	keycap.limit_exceeded_count  {slot}   counter   refusals
//	keycap.slot_released_count   {slot}   counter   slots released (connections gone)
//	keycap.slots_in_use          {slot}   up-down   acquired minus released, in this process
//	keycap.lease_lost_count      {lease}  counter   leases found gone on renewal
//	keycap.ghosts_dropped_count  {member} counter   members the heartbeat dropped as ghosts
//	keycap.wait_duration         s        histogram time spent waiting; also outcome "acquired" or "exceeded"
//	keycap.hold_duration         s        histogram time a slot was held, on release
//
// Store instruments have the attribute node, the store's partition ("" for
// a store of one node).
//
//	keycap.store_failure_count     {outage} counter   store outages, counted at their first failure
//	keycap.store_recovery_count    {outage} counter   store outages ended
//	keycap.store_failed_call_count {call}   counter   failed calls of the outages that ended, at recovery
//	keycap.store_outage_duration   s        histogram how long outages lasted, at recovery
//	keycap.store_up                1        gauge     0 during an outage of that partition, else 1
//	keycap.process_overloaded_count {call}  counter   store calls that ran out of their decision budget
//	                                                  in this process (CPU starvation), not in the store
//
// API pauses have the attribute api, the API's name: keep those to a bounded
// set (hosts, vendors), not one per user.
//
//	keycap.api_throttled_count {response} counter   throttled responses; also status (int) and source
//	keycap.api_exhausted_count {response} counter   responses that said nothing remains; also source
//	keycap.api_paused_count    {pause}    counter   pauses started or extended
//	keycap.api_pause_duration  s          histogram how long each pause lasts
//	keycap.api_held_count      {call}     counter   calls refused or jobs released; also paced (bool)
//	keycap.api_retried_count   {call}     counter   throttled requests sent again after a wait in place
//
// The Limiter passes its Acquire's context with SlotAcquired and
// LimitExceeded (Observer is a keycap.ContextObserver). When the span in it
// is recording, each adds a span event, keycap.slot_acquired or
// keycap.limit_exceeded, with the attributes family, limit, max, shadow and
// waited_seconds (float64). A refusal is a result, not an error: the span's
// status is left alone. The Observer starts no spans.
//
// Observe is called on the Acquire's goroutine, so it is quick: the
// attribute sets of each (family, limit, max, shadow) and of each API are
// built once and kept, up to 10,000 sets in all; past that, an event builds
// its attributes on every call.
package otelobserver
