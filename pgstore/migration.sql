-- keycap pgstore migration, version 4 (version 1, the wait lines, weights and
-- parents, and inspection and overrides).
--
-- Tables and functions live in schema public, named with prefix
-- keycap_. Every function is one decision, atomic on its own: call it
-- outside any transaction of yours (keycap does, on connections of its own),
-- or the locks it takes are held until that transaction ends.

CREATE SCHEMA IF NOT EXISTS public;

CREATE TABLE IF NOT EXISTS "public"."keycap_migration" (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The state is ephemeral, as in a Redis without persistence: UNLOGGED tables
-- write no WAL, so a decision waits for no disk flush. After a database crash
-- they are emptied (holders find their leases lost at their next renewal),
-- and standbys do not receive them (a failover starts empty).

-- Leases: one row per lease, pool = a 16-byte hash of the limit's name and key.
CREATE UNLOGGED TABLE IF NOT EXISTS "public"."keycap_lease" (
    pool       bytea       NOT NULL,
    owner      bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (pool, owner)
);
CREATE INDEX IF NOT EXISTS "keycap_lease_expires_at" ON "public"."keycap_lease" (expires_at);

CREATE UNLOGGED TABLE IF NOT EXISTS "public"."keycap_mark" (
    id         bytea PRIMARY KEY,
    started_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE UNLOGGED TABLE IF NOT EXISTS "public"."keycap_pause" (
    id    bytea PRIMARY KEY,
    until timestamptz NOT NULL
);

CREATE UNLOGGED TABLE IF NOT EXISTS "public"."keycap_rate" (
    id  bytea PRIMARY KEY,
    tat timestamptz NOT NULL -- GCRA's theoretical arrival time
);

-- Wait lines (version 2): one row per ticket, served in arrival order. A
-- ticket expires unless its owner queues again; when a slot frees it is
-- handed to the oldest live ticket (fill), as a lease that expires after the
-- ticket's claim window, and the owners served are announced with
-- NOTIFY "public_keycap_wake" ('<pool hex>:<owners hex>').
CREATE UNLOGGED TABLE IF NOT EXISTS "public"."keycap_ticket" (
    pool       bytea       NOT NULL,
    owner      bytea       NOT NULL,
    arrival    bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    claim_ms   bigint      NOT NULL,
    max_       integer     NOT NULL, -- the pool's max when the ticket queued: fills after a release
    PRIMARY KEY (pool, owner)
);
CREATE INDEX IF NOT EXISTS "keycap_ticket_line" ON "public"."keycap_ticket" (pool, arrival);
CREATE INDEX IF NOT EXISTS "keycap_ticket_expires_at" ON "public"."keycap_ticket" (expires_at);
CREATE SEQUENCE IF NOT EXISTS "public"."keycap_ticket_arrival";

-- Weights and parents (version 3). A lease or a ticket may take several
-- slots (weight). A pool of a parent's key is stored as the parent's 16
-- bytes followed by the key's: every key of a parent is one range of the
-- primary key, locked by the parent's lock. A ticket of a parent's key
-- keeps the key's max, share and minimum, and the parent's max, for the
-- fill that another key's release runs.
ALTER TABLE "public"."keycap_lease" ADD COLUMN IF NOT EXISTS weight integer NOT NULL DEFAULT 1;
ALTER TABLE "public"."keycap_ticket" ADD COLUMN IF NOT EXISTS weight integer NOT NULL DEFAULT 1;
ALTER TABLE "public"."keycap_ticket" ADD COLUMN IF NOT EXISTS share_ integer NOT NULL DEFAULT 1;
ALTER TABLE "public"."keycap_ticket" ADD COLUMN IF NOT EXISTS min_ integer NOT NULL DEFAULT 0;
ALTER TABLE "public"."keycap_ticket" ADD COLUMN IF NOT EXISTS parent_max integer;

-- The pool's lock: transaction-scoped, in keycap's own advisory-lock class,
-- so it never meets the application's locks. It is keyed by the ID's last
-- four bytes: the first four are the limit name's tag (version 4), the same
-- for every key of a name.
CREATE OR REPLACE FUNCTION "public"."keycap_lock"(p bytea) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(1262830445, ('x' || encode(substring(p FROM 13 FOR 4), 'hex'))::bit(32)::integer);
$$;

-- sweep: a bounded clean-up of expired rows of every table, run by about
-- one acquire in a hundred. Nothing else is needed: no cron. It skips rows
-- that others hold locked, so it never waits: two sweeps, or a sweep and an
-- acquire clearing the same pool, would otherwise lock rows in opposite
-- orders and deadlock.
CREATE OR REPLACE FUNCTION "public"."keycap_sweep"(now_ timestamptz) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM "public"."keycap_lease" WHERE ctid IN (SELECT ctid FROM "public"."keycap_lease" WHERE expires_at <= now_ LIMIT 1000 FOR UPDATE SKIP LOCKED);
    DELETE FROM "public"."keycap_mark"  WHERE ctid IN (SELECT ctid FROM "public"."keycap_mark"  WHERE expires_at <= now_ LIMIT 1000 FOR UPDATE SKIP LOCKED);
    DELETE FROM "public"."keycap_pause" WHERE ctid IN (SELECT ctid FROM "public"."keycap_pause" WHERE until <= now_ LIMIT 1000 FOR UPDATE SKIP LOCKED);
    DELETE FROM "public"."keycap_rate"  WHERE ctid IN (SELECT ctid FROM "public"."keycap_rate"  WHERE tat <= now_ LIMIT 1000 FOR UPDATE SKIP LOCKED);
    DELETE FROM "public"."keycap_ticket" WHERE ctid IN (SELECT ctid FROM "public"."keycap_ticket" WHERE expires_at <= now_ LIMIT 1000 FOR UPDATE SKIP LOCKED);
$$;

-- fill: hand pool p's free slots to the oldest live tickets of its line, as
-- leases expiring after each ticket's claim window, and announce the owners
-- served. m NULL: the max of the newest ticket. The caller holds the
-- pool's lock and has dropped its expired leases.
CREATE OR REPLACE FUNCTION "public"."keycap_fill"(p bytea, m integer, now_ timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    room integer;
    t record;
    served bytea := ''::bytea;
BEGIN
    DELETE FROM "public"."keycap_ticket" WHERE pool = p AND expires_at <= now_;
    IF m IS NULL THEN
        SELECT tk.max_ INTO m FROM "public"."keycap_ticket" tk WHERE tk.pool = p ORDER BY tk.arrival DESC LIMIT 1;
        IF m IS NULL THEN
            RETURN;
        END IF;
    END IF;
    SELECT greatest(m - coalesce(sum(l.weight), 0), 0) INTO room FROM "public"."keycap_lease" l WHERE l.pool = p;
    IF room = 0 THEN
        RETURN;
    END IF;
    -- A ticket whose owner already holds a lease takes no slot: it is dropped.
    DELETE FROM "public"."keycap_ticket" tk WHERE tk.pool = p
        AND EXISTS (SELECT 1 FROM "public"."keycap_lease" l WHERE l.pool = p AND l.owner = tk.owner);
    -- A ticket of weight n waits at the head until n slots are free.
    FOR t IN SELECT tk.owner, tk.claim_ms, tk.weight FROM "public"."keycap_ticket" tk WHERE tk.pool = p ORDER BY tk.arrival LOOP
        EXIT WHEN t.weight > room;
        DELETE FROM "public"."keycap_ticket" WHERE pool = p AND owner = t.owner;
        INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight) VALUES (p, t.owner, now_ + t.claim_ms * interval '1 millisecond', t.weight)
            ON CONFLICT ON CONSTRAINT "keycap_lease_pkey" DO NOTHING;
        served := served || t.owner;
        room := room - t.weight;
        EXIT WHEN room = 0;
    END LOOP;
    IF length(served) > 3900 THEN
        PERFORM pg_notify('public_keycap_wake', encode(p, 'hex')); -- too many to name: everyone looks
    ELSIF length(served) > 0 THEN
        PERFORM pg_notify('public_keycap_wake', encode(p, 'hex') || ':' || encode(served, 'hex'));
    END IF;
END
$$;

-- acquire: grant owner a lease on pool, expiring ttl_ms from now, if it holds
-- one already (a slot handed to its ticket included) or the pool holds fewer
-- than max_ unexpired leases and nobody waits in its line.
CREATE OR REPLACE FUNCTION "public"."keycap_acquire"(p bytea, o bytea, max_ integer, ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz;
    held integer;
    waiting boolean;
BEGIN
    PERFORM "public"."keycap_lock"(p);
    now_ := clock_timestamp();
    DELETE FROM "public"."keycap_lease" WHERE pool = p AND expires_at <= now_;
    waiting := EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = p);
    IF waiting THEN
        PERFORM "public"."keycap_fill"(p, max_, now_);
        waiting := EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = p);
    END IF;
    UPDATE "public"."keycap_lease" SET expires_at = now_ + ttl_ms * interval '1 millisecond'
        WHERE pool = p AND owner = o;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF waiting THEN
        RETURN false;
    END IF;
    SELECT coalesce(sum(weight), 0) INTO held FROM "public"."keycap_lease" WHERE pool = p;
    IF held >= max_ THEN
        RETURN false;
    END IF;
    INSERT INTO "public"."keycap_lease" (pool, owner, expires_at) VALUES (p, o, now_ + ttl_ms * interval '1 millisecond');
    IF random() < 0.01 THEN
        PERFORM "public"."keycap_sweep"(now_);
    END IF;
    RETURN true;
END
$$;

-- queue: acquire for a caller willing to wait: when refused, owner holds a
-- ticket in the line (keeping its place if it had one), expiring tttl_ms
-- from now. Returns whether owner holds a lease, and when not how many
-- tickets wait before its own.
CREATE OR REPLACE FUNCTION "public"."keycap_queue"(p bytea, o bytea, m integer, ttl_ms bigint, tttl_ms bigint, claim bigint,
    OUT granted boolean, OUT ahead integer)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT w.granted, w.ahead INTO granted, ahead FROM "public"."keycap_wtake"(p, o, m, ttl_ms, 1, tttl_ms, claim) w; -- weight 1
END
$$;

-- release: free owner's lease in pool (with leave, take its ticket out of
-- the line too), and hand the slot to the line.
CREATE OR REPLACE FUNCTION "public"."keycap_release"(p bytea, o bytea, leave boolean) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz;
BEGIN
    PERFORM "public"."keycap_lock"(p);
    DELETE FROM "public"."keycap_lease" WHERE pool = p AND owner = o;
    IF leave THEN
        DELETE FROM "public"."keycap_ticket" WHERE pool = p AND owner = o;
    END IF;
    IF EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = p) THEN
        now_ := clock_timestamp();
        DELETE FROM "public"."keycap_lease" WHERE pool = p AND expires_at <= now_;
        PERFORM "public"."keycap_fill"(p, NULL, now_);
    END IF;
END
$$;

-- renew: extend each unexpired lease of the batch; returns, in order, whether
-- each was renewed (false: lost).
CREATE OR REPLACE FUNCTION "public"."keycap_renew"(pools bytea[], owners bytea[], ttls bigint[]) RETURNS SETOF boolean
LANGUAGE sql AS $$
    WITH input AS (
        SELECT * FROM unnest(pools, owners, ttls) WITH ORDINALITY AS t(pool, owner, ttl, i)
    ), renewed AS (
        UPDATE "public"."keycap_lease" l SET expires_at = clock_timestamp() + input.ttl * interval '1 millisecond'
        FROM input
        WHERE l.pool = input.pool AND l.owner = input.owner AND l.expires_at > clock_timestamp()
        RETURNING input.i
    )
    SELECT input.i IN (SELECT i FROM renewed) FROM input ORDER BY input.i;
$$;

-- sync: make node's members of each pool exactly the given ones (renewed,
-- added back if lost), dropping node's other members and expired ones.
-- pools and members are parallel arrays; a NULL member names a pool in which
-- node holds nothing. Returns, per pool in order of first appearance, how
-- many of node's members were dropped.
CREATE OR REPLACE FUNCTION "public"."keycap_sync"(node bytea, ttl_ms bigint, pools bytea[], members bytea[])
RETURNS TABLE (pool bytea, removed integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    p bytea;
    now_ timestamptz;
    n integer;
BEGIN
    -- In the order of the pools' lock keys, so that two nodes' heartbeats
    -- never lock in opposite orders.
    FOR p IN SELECT d.pl FROM (SELECT DISTINCT t.pl FROM unnest(pools) AS t(pl)) d
             ORDER BY substring(d.pl FROM 13 FOR 4), d.pl LOOP
        PERFORM "public"."keycap_lock"(p);
        now_ := clock_timestamp();
        DELETE FROM "public"."keycap_lease" l WHERE l.pool = p AND l.expires_at <= now_;
        DELETE FROM "public"."keycap_lease" l WHERE l.pool = p AND substring(l.owner FROM 1 FOR 8) = node
            AND l.owner <> ALL (SELECT m FROM unnest(pools, members) AS u(pl, m) WHERE u.pl = p AND m IS NOT NULL);
        GET DIAGNOSTICS n = ROW_COUNT;
        INSERT INTO "public"."keycap_lease" (pool, owner, expires_at)
            SELECT p, u.m, now_ + ttl_ms * interval '1 millisecond'
            FROM unnest(pools, members) AS u(pl, m) WHERE u.pl = p AND u.m IS NOT NULL
            ON CONFLICT ON CONSTRAINT "keycap_lease_pkey" DO UPDATE SET expires_at = excluded.expires_at;
        pool := p;
        removed := n;
        RETURN NEXT;
    END LOOP;
END
$$;

-- mark: start the mark unless it runs; returns its age in milliseconds and
-- whether this call started it.
CREATE OR REPLACE FUNCTION "public"."keycap_mark"(id_ bytea, ttl_ms bigint, OUT age_ms bigint, OUT started boolean)
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
    s timestamptz;
    e timestamptz;
BEGIN
    INSERT INTO "public"."keycap_mark" (id, started_at, expires_at) VALUES (id_, now_, now_ + ttl_ms * interval '1 millisecond')
        ON CONFLICT (id) DO NOTHING;
    IF FOUND THEN
        age_ms := 0; started := true; RETURN;
    END IF;
    SELECT started_at, expires_at INTO s, e FROM "public"."keycap_mark" WHERE id = id_ FOR UPDATE;
    now_ := clock_timestamp();
    IF NOT FOUND THEN -- swept in between: start it again
        INSERT INTO "public"."keycap_mark" (id, started_at, expires_at) VALUES (id_, now_, now_ + ttl_ms * interval '1 millisecond')
            ON CONFLICT (id) DO NOTHING;
        age_ms := 0; started := true; RETURN;
    END IF;
    IF e <= now_ THEN
        UPDATE "public"."keycap_mark" SET started_at = now_, expires_at = now_ + ttl_ms * interval '1 millisecond' WHERE id = id_;
        age_ms := 0; started := true; RETURN;
    END IF;
    age_ms := floor(extract(epoch FROM now_ - s) * 1000);
    started := false;
END
$$;

-- pause: pause id for at least ttl_ms; never shorten a longer pause. Returns
-- how many milliseconds the pause now lasts.
CREATE OR REPLACE FUNCTION "public"."keycap_pause"(id_ bytea, ttl_ms bigint) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO "public"."keycap_pause" AS p (id, until) VALUES (id_, clock_timestamp() + greatest(ttl_ms, 0) * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET until = greatest(p.until, excluded.until)
        RETURNING greatest(ceil(extract(epoch FROM until - clock_timestamp()) * 1000), 0)::bigint;
$$;

-- paused: how many milliseconds id remains paused (0: not paused).
CREATE OR REPLACE FUNCTION "public"."keycap_paused"(id_ bytea) RETURNS bigint
LANGUAGE sql AS $$
    SELECT coalesce((SELECT greatest(ceil(extract(epoch FROM until - clock_timestamp()) * 1000), 0)::bigint
        FROM "public"."keycap_pause" WHERE id = id_), 0);
$$;

-- pace: GCRA. Takes one event under events per period_ms with burst; returns
-- 0 when it may happen now (and counts it), else the milliseconds until it may.
CREATE OR REPLACE FUNCTION "public"."keycap_pace"(id_ bytea, events integer, period_ms bigint, burst integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz;
    emission interval := (period_ms::double precision / events) * interval '1 millisecond';
    tat_ timestamptz;
    next_ timestamptz;
    allow_at timestamptz;
BEGIN
    INSERT INTO "public"."keycap_rate" (id, tat) VALUES (id_, '-infinity') ON CONFLICT (id) DO NOTHING;
    SELECT tat INTO tat_ FROM "public"."keycap_rate" WHERE id = id_ FOR UPDATE;
    now_ := clock_timestamp();
    tat_ := greatest(tat_, now_);
    next_ := tat_ + emission;
    allow_at := next_ - emission * burst;
    IF now_ < allow_at THEN
        RETURN greatest(ceil(extract(epoch FROM allow_at - now_) * 1000), 1)::bigint;
    END IF;
    UPDATE "public"."keycap_rate" SET tat = next_ WHERE id = id_;
    RETURN 0;
END
$$;

-- wtake: acquire (tttl_ms 0) or queue for a lease of weight w on a pool
-- without a parent, whose plain leases count one slot each.
CREATE OR REPLACE FUNCTION "public"."keycap_wtake"(p bytea, o bytea, m integer, ttl_ms bigint, w integer, tttl_ms bigint, claim bigint,
    OUT granted boolean, OUT ahead integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz;
    mine bigint;
BEGIN
    PERFORM "public"."keycap_lock"(p);
    now_ := clock_timestamp();
    DELETE FROM "public"."keycap_lease" WHERE pool = p AND expires_at <= now_;
    PERFORM "public"."keycap_fill"(p, m, now_);
    ahead := 0;
    UPDATE "public"."keycap_lease" SET expires_at = now_ + ttl_ms * interval '1 millisecond'
        WHERE pool = p AND owner = o;
    IF FOUND THEN
        DELETE FROM "public"."keycap_ticket" WHERE pool = p AND owner = o;
        granted := true;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = p)
        AND (SELECT coalesce(sum(l.weight), 0) FROM "public"."keycap_lease" l WHERE l.pool = p) + w <= m THEN
        INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight) VALUES (p, o, now_ + ttl_ms * interval '1 millisecond', w);
        granted := true;
        RETURN;
    END IF;
    granted := false;
    IF tttl_ms = 0 THEN
        RETURN;
    END IF;
    INSERT INTO "public"."keycap_ticket" (pool, owner, arrival, expires_at, claim_ms, max_, weight)
        VALUES (p, o, nextval('"public"."keycap_ticket_arrival"'), now_ + tttl_ms * interval '1 millisecond', claim, m, w)
        ON CONFLICT ON CONSTRAINT "keycap_ticket_pkey" DO UPDATE
        SET expires_at = excluded.expires_at, claim_ms = excluded.claim_ms, max_ = excluded.max_, weight = excluded.weight
        RETURNING arrival INTO mine;
    SELECT count(*) INTO ahead FROM "public"."keycap_ticket" WHERE pool = p AND arrival < mine;
    IF random() < 0.01 THEN -- callers that wait sweep too: jobs may never acquire
        PERFORM "public"."keycap_sweep"(now_);
    END IF;
END
$$;

-- pbest: the waiting key of parent par that the next free slot goes to:
-- among the keys whose head ticket fits their own max, a key below its
-- minimum first, then the key holding the fewest slots for its share (its
-- minimum, below it), the oldest head on a tie. No row when none waits.
-- The keys with tickets are walked one index probe each (a recursive skip
-- over the line index), and each key's head is its oldest live ticket
-- whose owner holds no lease: the cost follows the keys waiting, not the
-- tickets. (PL/pgSQL, whose plans are kept per session: a SQL function's
-- query would be planned again on every call.)
CREATE OR REPLACE FUNCTION "public"."keycap_pbest"(par bytea, now_ timestamptz)
RETURNS TABLE (pool bytea, owner bytea, weight integer, claim_ms bigint, held bigint, share_ integer, min_ integer, parent_max integer)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE kids(pool) AS (
        (SELECT t.pool FROM "public"."keycap_ticket" t
            WHERE t.pool BETWEEN par || '\x00000000000000000000000000000000'::bytea AND par || '\xffffffffffffffffffffffffffffffff'::bytea
            ORDER BY t.pool LIMIT 1)
        UNION ALL
        SELECT (SELECT t.pool FROM "public"."keycap_ticket" t
                WHERE t.pool > kids.pool AND t.pool <= par || '\xffffffffffffffffffffffffffffffff'::bytea
                ORDER BY t.pool LIMIT 1)
        FROM kids WHERE kids.pool IS NOT NULL
    )
    SELECT h.pool, h.owner, h.weight, h.claim_ms, c.held, h.share_, h.min_, h.parent_max
    FROM kids
    CROSS JOIN LATERAL (
        SELECT t.pool, t.owner, t.arrival, t.weight, t.claim_ms, t.max_, t.share_, t.min_, t.parent_max
        FROM "public"."keycap_ticket" t
        WHERE t.pool = kids.pool AND t.expires_at > now_
            AND NOT EXISTS (SELECT 1 FROM "public"."keycap_lease" l WHERE l.pool = t.pool AND l.owner = t.owner)
        ORDER BY t.arrival LIMIT 1
    ) h
    CROSS JOIN LATERAL (SELECT coalesce(sum(l.weight), 0) AS held FROM "public"."keycap_lease" l WHERE l.pool = h.pool) c
    WHERE kids.pool IS NOT NULL AND c.held + h.weight <= h.max_
    ORDER BY c.held < h.min_ DESC,
        c.held::float8 / (CASE WHEN c.held < h.min_ THEN h.min_ ELSE h.share_ END),
        h.arrival
    LIMIT 1;
END
$$;

-- pheld: the slots held by every key of parent par.
CREATE OR REPLACE FUNCTION "public"."keycap_pheld"(par bytea) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(sum(l.weight), 0) FROM "public"."keycap_lease" l
        WHERE l.pool BETWEEN par || '\x00000000000000000000000000000000'::bytea AND par || '\xffffffffffffffffffffffffffffffff'::bytea);
END
$$;

-- pfill: hand parent par's free slots to its waiting keys by the fair
-- share (pbest), as leases expiring after each ticket's claim window, and
-- announce the owners served on the parent. The best key's head waits
-- until its weight fits: nobody overtakes it. pmax NULL: the parent's max
-- of the newest ticket. The caller holds the parent's lock and has dropped
-- its expired leases.
CREATE OR REPLACE FUNCTION "public"."keycap_pfill"(par bytea, pmax integer, now_ timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    lo bytea := par || '\x00000000000000000000000000000000'::bytea;
    hi bytea := par || '\xffffffffffffffffffffffffffffffff'::bytea;
    total bigint;
    b record;
    served bytea := ''::bytea;
BEGIN
    DELETE FROM "public"."keycap_ticket" WHERE pool BETWEEN lo AND hi AND expires_at <= now_;
    IF NOT EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool BETWEEN lo AND hi) THEN
        RETURN; -- nobody waits: the common case, decided by one index probe
    END IF;
    IF pmax IS NULL THEN
        SELECT tk.parent_max INTO pmax FROM "public"."keycap_ticket" tk WHERE tk.pool BETWEEN lo AND hi ORDER BY tk.arrival DESC LIMIT 1;
        IF pmax IS NULL THEN
            RETURN;
        END IF;
    END IF;
    total := "public"."keycap_pheld"(par);
    LOOP
        SELECT * INTO b FROM "public"."keycap_pbest"(par, now_);
        EXIT WHEN b.pool IS NULL OR total + b.weight > pmax;
        DELETE FROM "public"."keycap_ticket" WHERE pool = b.pool AND owner = b.owner;
        INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight) VALUES (b.pool, b.owner, now_ + b.claim_ms * interval '1 millisecond', b.weight);
        total := total + b.weight;
        served := served || b.owner;
    END LOOP;
    IF length(served) > 3900 THEN
        PERFORM pg_notify('public_keycap_wake', encode(par, 'hex'));
    ELSIF length(served) > 0 THEN
        PERFORM pg_notify('public_keycap_wake', encode(par, 'hex') || ':' || encode(served, 'hex'));
    END IF;
END
$$;

-- ptake: acquire (tttl_ms 0) or queue for a lease of weight w in key k of
-- parent par: granted when the key's pool and the parent have room, nobody
-- waits in the key's line, and no waiting key comes first by the share.
CREATE OR REPLACE FUNCTION "public"."keycap_ptake"(par bytea, k bytea, o bytea, m integer, ttl_ms bigint, w integer,
    pmax integer, sh integer, mn integer, tttl_ms bigint, claim bigint,
    OUT granted boolean, OUT ahead integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    kp bytea := par || k;
    now_ timestamptz;
    held bigint;
    b record;
    mine bigint;
    first boolean := true;
BEGIN
    PERFORM "public"."keycap_lock"(par);
    now_ := clock_timestamp();
    DELETE FROM "public"."keycap_lease" WHERE pool BETWEEN par || '\x00000000000000000000000000000000'::bytea
        AND par || '\xffffffffffffffffffffffffffffffff'::bytea AND expires_at <= now_;
    PERFORM "public"."keycap_pfill"(par, pmax, now_);
    ahead := 0;
    UPDATE "public"."keycap_lease" SET expires_at = now_ + ttl_ms * interval '1 millisecond'
        WHERE pool = kp AND owner = o;
    IF FOUND THEN
        DELETE FROM "public"."keycap_ticket" WHERE pool = kp AND owner = o;
        granted := true;
        RETURN;
    END IF;
    -- Slots kept for the key (its lease of the zero owner) go to its next caller.
    IF NOT EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = kp) THEN
        UPDATE "public"."keycap_lease" SET weight = weight - w
            WHERE pool = kp AND owner = '\x00000000000000000000000000000000'::bytea AND weight >= w;
        IF FOUND THEN
            DELETE FROM "public"."keycap_lease" WHERE pool = kp AND owner = '\x00000000000000000000000000000000'::bytea AND weight = 0;
            INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight) VALUES (kp, o, now_ + ttl_ms * interval '1 millisecond', w);
            granted := true;
            RETURN;
        END IF;
    END IF;
    SELECT coalesce(sum(l.weight), 0) INTO held FROM "public"."keycap_lease" l WHERE l.pool = kp;
    IF NOT EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = kp) AND held + w <= m
        AND "public"."keycap_pheld"(par) + w <= pmax THEN
        IF EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool BETWEEN par || '\x00000000000000000000000000000000'::bytea
                AND par || '\xffffffffffffffffffffffffffffffff'::bytea) THEN
            SELECT * INTO b FROM "public"."keycap_pbest"(par, now_);
            IF b.pool IS NOT NULL THEN
                IF (held < mn) <> (b.held < b.min_) THEN
                    first := held < mn;
                ELSIF held < mn THEN
                    first := held * b.min_ < b.held * mn;
                ELSE
                    first := held * b.share_ < b.held * sh;
                END IF;
            END IF;
        END IF;
        IF first THEN
            INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight) VALUES (kp, o, now_ + ttl_ms * interval '1 millisecond', w);
            granted := true;
            RETURN;
        END IF;
    END IF;
    granted := false;
    IF tttl_ms = 0 THEN
        RETURN;
    END IF;
    INSERT INTO "public"."keycap_ticket" (pool, owner, arrival, expires_at, claim_ms, max_, weight, share_, min_, parent_max)
        VALUES (kp, o, nextval('"public"."keycap_ticket_arrival"'), now_ + tttl_ms * interval '1 millisecond', claim, m, w, sh, mn, pmax)
        ON CONFLICT ON CONSTRAINT "keycap_ticket_pkey" DO UPDATE
        SET expires_at = excluded.expires_at, claim_ms = excluded.claim_ms, max_ = excluded.max_, weight = excluded.weight,
            share_ = excluded.share_, min_ = excluded.min_, parent_max = excluded.parent_max
        RETURNING arrival INTO mine;
    SELECT count(*) INTO ahead FROM "public"."keycap_ticket" WHERE pool = kp AND arrival < mine;
    IF random() < 0.01 THEN
        PERFORM "public"."keycap_sweep"(now_);
    END IF;
END
$$;

-- pgive: free owner's lease in key k of parent par (with leave, take its
-- ticket out of the line too), and hand the slots to the waiting keys; but
-- when keys wait, none in k's own line, and k would be served first if it
-- asked again (its share sh, its minimum mn), keep them for k for keep_ms:
-- a lease of the zero owner, which k's next caller takes over. Returns
-- whether it kept them.
DROP FUNCTION IF EXISTS "public"."keycap_pgive"(bytea, bytea, bytea, boolean);
CREATE OR REPLACE FUNCTION "public"."keycap_pgive"(par bytea, k bytea, o bytea, leave boolean, keep_ms bigint, sh integer, mn integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    kp bytea := par || k;
    lo bytea := par || '\x00000000000000000000000000000000'::bytea;
    hi bytea := par || '\xffffffffffffffffffffffffffffffff'::bytea;
    now_ timestamptz;
    w integer;
    held bigint;
    b record;
    first boolean;
    kept boolean := false;
    waiting boolean;
BEGIN
    PERFORM "public"."keycap_lock"(par);
    waiting := EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool BETWEEN lo AND hi);
    IF waiting THEN
        now_ := clock_timestamp();
        -- First: a lease that expired frees nothing to keep.
        DELETE FROM "public"."keycap_lease" WHERE pool BETWEEN lo AND hi AND expires_at <= now_;
    END IF;
    DELETE FROM "public"."keycap_lease" WHERE pool = kp AND owner = o RETURNING weight INTO w;
    IF leave THEN
        DELETE FROM "public"."keycap_ticket" WHERE pool = kp AND owner = o;
    END IF;
    IF waiting AND EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool BETWEEN lo AND hi) THEN
        IF w IS NOT NULL AND NOT leave AND keep_ms > 0 AND NOT EXISTS (SELECT 1 FROM "public"."keycap_ticket" WHERE pool = kp) THEN
            SELECT * INTO b FROM "public"."keycap_pbest"(par, now_);
            IF b.pool IS NOT NULL AND b.pool <> kp THEN
                SELECT coalesce(sum(l.weight), 0) INTO held FROM "public"."keycap_lease" l WHERE l.pool = kp;
                IF (held < mn) <> (b.held < b.min_) THEN
                    first := held < mn;
                ELSIF held < mn THEN
                    first := held * b.min_ < b.held * mn;
                ELSE
                    first := held * b.share_ < b.held * sh;
                END IF;
                IF first THEN
                    INSERT INTO "public"."keycap_lease" (pool, owner, expires_at, weight)
                        VALUES (kp, '\x00000000000000000000000000000000'::bytea, now_ + keep_ms * interval '1 millisecond', w)
                        ON CONFLICT ON CONSTRAINT "keycap_lease_pkey" DO UPDATE
                        SET weight = "public"."keycap_lease".weight + excluded.weight, expires_at = excluded.expires_at;
                    kept := true;
                END IF;
            END IF;
        END IF;
        PERFORM "public"."keycap_pfill"(par, NULL, now_);
    END IF;
    RETURN kept;
END
$$;

-- Inspection (version 4). A pool's ID starts with its limit name's 4-byte
-- tag, so the pools of a name, and the keys of the parents of a name (stored
-- after their parent's 16 bytes), are one range of each table's primary key.
-- A parent's key is also found by its own tag: these partial indexes hold
-- the keys' 16 bytes of the rows stored after a parent's, and nothing of the
-- others' (a plain decision writes none of them).
CREATE INDEX IF NOT EXISTS "keycap_lease_kid" ON "public"."keycap_lease" (substring(pool FROM 17 FOR 16)) WHERE length(pool) = 32;
CREATE INDEX IF NOT EXISTS "keycap_ticket_kid" ON "public"."keycap_ticket" (substring(pool FROM 17 FOR 16)) WHERE length(pool) = 32;

-- inspect: a page of at most n pools of tag after the pool after (NULL: the
-- first page) that hold an unexpired lease or ticket, with their leases
-- (kind 0) and their tickets (kind 1, in line order), each with its owner,
-- weight and microseconds left by the database's clock; a parent's pool
-- shows every key's, and each key its own under its pool. When more pools
-- follow, a last row of kind 2 names the page's last pool: the cursor.
-- The pools are walked one index probe each per source (a recursive skip
-- over the primary keys and the keys' indexes), and only the page's pools'
-- rows are read: a page never costs the tables. One statement, one
-- snapshot. The settings pin the plans to those indexes even when the
-- tables' statistics are missing or stale (autovacuum off, an UNLOGGED
-- table emptied by a crash): each probe reads its index in order, never a
-- bitmap of the range to sort, and the page's rows are looked up by pool,
-- never by expiry (OFFSET 0 keeps the expiry check out of those scans).
-- The cost that pinning adds (to the final sort, which every plan has)
-- would have JIT compile the query: off; and the plan is made once per
-- session, whatever the first calls' values (a generic plan).
CREATE OR REPLACE FUNCTION "public"."keycap_inspect"(tag bytea, after bytea, n integer)
RETURNS TABLE (pool bytea, kind smallint, owner bytea, weight integer, left_us bigint)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    hi bytea := tag || '\xffffffffffffffffffffffff'::bytea; -- the tag's last pool ID
    top bytea := hi || '\xffffffffffffffffffffffffffffffff'::bytea; -- and the last key of its last parent
    -- The walk starts after own_from in the primary keys (the rows of a
    -- pool, or of a parent and its keys, are up to its ID || ff..ff), and
    -- after kid_from in the keys' indexes.
    own_from bytea := coalesce(after || '\xffffffffffffffffffffffffffffffff'::bytea, tag);
    kid_from bytea := coalesce(after, tag);
BEGIN
    RETURN QUERY
    WITH RECURSIVE f AS MATERIALIZED (
        -- Which of the four sources may hold anything of the tag from the
        -- cursor on: the others are never probed (a name without lines or
        -- parents costs one probe and one read per pool).
        SELECT EXISTS (SELECT FROM "public"."keycap_ticket" t WHERE t.pool > own_from AND t.pool <= top) AS tickets,
            EXISTS (SELECT FROM "public"."keycap_lease" l WHERE length(l.pool) = 32
                AND substring(l.pool FROM 17 FOR 16) > kid_from AND substring(l.pool FROM 17 FOR 16) <= hi) AS kid_leases,
            EXISTS (SELECT FROM "public"."keycap_ticket" t WHERE length(t.pool) = 32
                AND substring(t.pool FROM 17 FOR 16) > kid_from AND substring(t.pool FROM 17 FOR 16) <= hi) AS kid_tickets
    ), ids(id, i) AS (
        -- The next pool after the last one found (id), or after the cursor
        -- (i = 0): in the primary keys after the last row of the pool (or
        -- parent) found, and in the keys' indexes after it.
        SELECT NULL::bytea, 0
        UNION ALL
        SELECT least(
            (SELECT substring(l.pool FROM 1 FOR 16) FROM "public"."keycap_lease" l
                WHERE l.pool > CASE WHEN ids.i = 0 THEN own_from ELSE ids.id || '\xffffffffffffffffffffffffffffffff'::bytea END
                    AND l.pool <= top AND l.expires_at > now_
                ORDER BY l.pool LIMIT 1),
            (SELECT substring(t.pool FROM 1 FOR 16) FROM "public"."keycap_ticket" t
                WHERE f.tickets AND t.pool > CASE WHEN ids.i = 0 THEN own_from ELSE ids.id || '\xffffffffffffffffffffffffffffffff'::bytea END
                    AND t.pool <= top AND t.expires_at > now_
                ORDER BY t.pool LIMIT 1),
            (SELECT substring(l.pool FROM 17 FOR 16) FROM "public"."keycap_lease" l
                WHERE f.kid_leases AND length(l.pool) = 32
                    AND substring(l.pool FROM 17 FOR 16) > CASE WHEN ids.i = 0 THEN kid_from ELSE ids.id END
                    AND substring(l.pool FROM 17 FOR 16) <= hi AND l.expires_at > now_
                ORDER BY substring(l.pool FROM 17 FOR 16) LIMIT 1),
            (SELECT substring(t.pool FROM 17 FOR 16) FROM "public"."keycap_ticket" t
                WHERE f.kid_tickets AND length(t.pool) = 32
                    AND substring(t.pool FROM 17 FOR 16) > CASE WHEN ids.i = 0 THEN kid_from ELSE ids.id END
                    AND substring(t.pool FROM 17 FOR 16) <= hi AND t.expires_at > now_
                ORDER BY substring(t.pool FROM 17 FOR 16) LIMIT 1)
        ), ids.i + 1
        FROM ids CROSS JOIN f
        WHERE ids.i <= n AND (ids.i = 0 OR ids.id IS NOT NULL)
    ), page AS (
        SELECT ids.id FROM ids WHERE ids.id IS NOT NULL AND ids.i BETWEEN 1 AND n
    )
    SELECT r.pool, r.kind, r.owner, r.weight, r.left_us FROM (
        SELECT p.id AS pool, 0::smallint AS kind, l.owner, l.weight,
            (extract(epoch FROM l.expires_at - now_) * 1000000)::bigint AS left_us, NULL::bigint AS arrival
        FROM page p CROSS JOIN f CROSS JOIN LATERAL (
            (SELECT l.owner, l.weight, l.expires_at FROM "public"."keycap_lease" l
                WHERE l.pool >= p.id AND l.pool <= p.id || '\xffffffffffffffffffffffffffffffff'::bytea OFFSET 0)
            UNION ALL
            (SELECT l.owner, l.weight, l.expires_at FROM "public"."keycap_lease" l
                WHERE f.kid_leases AND length(l.pool) = 32 AND substring(l.pool FROM 17 FOR 16) = p.id OFFSET 0)
        ) l
        WHERE l.expires_at > now_
        UNION ALL
        SELECT p.id, 1::smallint, t.owner, t.weight, (extract(epoch FROM t.expires_at - now_) * 1000000)::bigint, t.arrival
        FROM page p CROSS JOIN f CROSS JOIN LATERAL (
            (SELECT t.owner, t.weight, t.expires_at, t.arrival FROM "public"."keycap_ticket" t
                WHERE f.tickets AND t.pool >= p.id AND t.pool <= p.id || '\xffffffffffffffffffffffffffffffff'::bytea OFFSET 0)
            UNION ALL
            (SELECT t.owner, t.weight, t.expires_at, t.arrival FROM "public"."keycap_ticket" t
                WHERE f.kid_tickets AND length(t.pool) = 32 AND substring(t.pool FROM 17 FOR 16) = p.id OFFSET 0)
        ) t
        WHERE t.expires_at > now_
        UNION ALL
        SELECT ids.id, 2::smallint, NULL::bytea, 0, 0::bigint, NULL::bigint FROM ids
        WHERE ids.i = n AND EXISTS (SELECT 1 FROM ids more WHERE more.i = n + 1 AND more.id IS NOT NULL)
    ) r
    ORDER BY r.pool, r.kind, r.arrival, r.owner;
END
$$;

-- inspect_pauses: a page of at most n running pauses (pace false) and paces
-- ahead of the clock (pace true: their theoretical arrival time is ahead)
-- of tag, after the ID after (NULL: the first page), with the microseconds
-- left; one more row than n when more follow. Each table is read in its
-- primary key's order from the cursor, n + 1 live rows at most (the
-- settings keep it so whatever the statistics, as inspect's do).
CREATE OR REPLACE FUNCTION "public"."keycap_inspect_pauses"(tag bytea, after bytea, n integer)
RETURNS TABLE (id bytea, pace boolean, left_us bigint)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    lo bytea := coalesce(after, tag);
    hi bytea := tag || '\xffffffffffffffffffffffff'::bytea;
BEGIN
    RETURN QUERY
    SELECT x.id, x.pace, x.left_us FROM (
        (SELECT p.id, false AS pace, (extract(epoch FROM p.until - now_) * 1000000)::bigint AS left_us
            FROM "public"."keycap_pause" p WHERE p.id > lo AND p.id <= hi AND p.until > now_ ORDER BY p.id LIMIT n + 1)
        UNION ALL
        (SELECT r.id, true, (extract(epoch FROM r.tat - now_) * 1000000)::bigint
            FROM "public"."keycap_rate" r WHERE r.id > lo AND r.id <= hi AND r.tat > now_ ORDER BY r.id LIMIT n + 1)
    ) x
    ORDER BY x.id, x.pace LIMIT n + 1;
END
$$;

-- Overrides (version 4): one row per overridden pool, with the family, name
-- and key in clear (bytea: a Go string may hold any byte, NUL included,
-- which text refuses), max_ -1 to keep the limit's max, share_ 0 to keep its
-- share, and expires_at NULL for an override that lasts until it is reset.
-- Unlike the state above, they are configuration: logged tables, kept across
-- a crash and sent to standbys. Their version is one row, bumped in the
-- transaction of every change, so a reader's snapshot sees a version and
-- the overrides of that version together.
CREATE TABLE IF NOT EXISTS "public"."keycap_override" (
    pool       bytea       PRIMARY KEY,
    family     smallint    NOT NULL,
    name       bytea       NOT NULL,
    key        bytea       NOT NULL,
    max_       integer     NOT NULL,
    share_     integer     NOT NULL,
    expires_at timestamptz
);
CREATE TABLE IF NOT EXISTS "public"."keycap_override_version" (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
INSERT INTO "public"."keycap_override_version" (one, version) VALUES (true, 0) ON CONFLICT DO NOTHING;

-- set_override: store (or replace) the override of pool p, expiring after
-- ttl_us microseconds (0: never), drop the expired ones, and bump the
-- version. The version's row is locked first, by every change: changes
-- run one at a time and never deadlock.
CREATE OR REPLACE FUNCTION "public"."keycap_set_override"(p bytea, f smallint, nm bytea, k bytea, m integer, sh integer, ttl_us bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    v bigint;
BEGIN
    -- Never a version a client may already hold for other overrides, even
    -- after a failover to a standby that missed the last change.
    UPDATE "public"."keycap_override_version" SET version = greatest(version + 1, (extract(epoch FROM now_) * 1000000)::bigint)
        RETURNING version INTO v;
    DELETE FROM "public"."keycap_override" WHERE expires_at <= now_;
    INSERT INTO "public"."keycap_override" (pool, family, name, key, max_, share_, expires_at)
        VALUES (p, f, nm, k, m, sh, CASE WHEN ttl_us > 0 THEN now_ + ttl_us * interval '1 microsecond' END)
        ON CONFLICT (pool) DO UPDATE SET family = excluded.family, name = excluded.name, key = excluded.key,
            max_ = excluded.max_, share_ = excluded.share_, expires_at = excluded.expires_at;
    RETURN v;
END
$$;

-- delete_override: remove the override of pool p; bump the version if
-- there was one.
CREATE OR REPLACE FUNCTION "public"."keycap_delete_override"(p bytea) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v bigint;
BEGIN
    SELECT version INTO v FROM "public"."keycap_override_version" FOR UPDATE;
    DELETE FROM "public"."keycap_override" WHERE pool = p;
    IF FOUND THEN
        UPDATE "public"."keycap_override_version" SET version = greatest(version + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
            RETURNING version INTO v;
    END IF;
    RETURN v;
END
$$;

-- overrides: the version, in a first row of NULL pool; then, unless the
-- version is still since, every unexpired override with its microseconds
-- left (0: none). One snapshot (STABLE) for both reads.
CREATE OR REPLACE FUNCTION "public"."keycap_overrides"(since bigint)
RETURNS TABLE (version bigint, pool bytea, family smallint, name bytea, key bytea, max_ integer, share_ integer, left_us bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    v bigint;
BEGIN
    SELECT ov.version INTO v FROM "public"."keycap_override_version" ov;
    RETURN QUERY SELECT v, NULL::bytea, 0::smallint, NULL::bytea, NULL::bytea, 0, 0, 0::bigint;
    IF v = since THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v, o.pool, o.family, o.name, o.key, o.max_, o.share_,
        coalesce((extract(epoch FROM o.expires_at - now_) * 1000000)::bigint, 0)
    FROM "public"."keycap_override" o
    WHERE o.expires_at IS NULL OR o.expires_at > now_;
END
$$;

INSERT INTO "public"."keycap_migration" (version) VALUES (1), (2), (3), (4) ON CONFLICT DO NOTHING;
