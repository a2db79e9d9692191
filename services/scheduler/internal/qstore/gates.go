package qstore

// Flow control at dispatch (docs/flow-control.md): concurrency keys,
// dispatch rate limits and circuit breakers, all one mechanism in the
// dispatch script (gates.lua): a popped job whose gate is closed is parked
// in that gate's parked set, ordered by its ready score, and the step goes
// on with other work; when the gate opens, the parked heads go back to
// ready with their old scores. Jobs of a tenant without rate limits or
// open breakers, and without a concurrency key, cost no Redis command more.
//
// Keys, under the prefix P, in addition to those of qstore.go and fair.go:
//
//	P gate:c:<tenant>:<key>          ZSET  jobs parked on a concurrency key, by ready score
//	P gate:c:<tenant>:<key>:run      SET   jobs holding a slot of the key (running, or admitted)
//	P gate:r:<tenant>:<type>         ZSET  jobs parked on a dispatch rate limit
//	P gate:r:<tenant>:<type>:bucket  HASH  tok (tokens), at (ms of the last refill)
//	P gate:k:<tenant>:@<key>         ZSET  jobs parked on a concurrency key's dispatch rate limit
//	P gate:k:<tenant>:@<key>:bucket  HASH  as for a type
//	P gate:b:<tenant>:<type>         ZSET  jobs parked on an open (or half-open) breaker
//	P gate:bf:<tenant>:<type>        ZSET  counted failures within the breaker's window, by ms
//	P gates:wake                     ZSET  "<kind>\n<tenant>\n<name>" → ms a gate's timer is due
//	P gates:outbox                   ZSET  breaker transitions ("<seq> <JSON>") → ms they may be claimed
//	P gates:evseq                    STRING sequence of the transitions
//	P gates:tenants                  SET   tenants with flow-control settings
//	P gates:stats                    HASH  c, r, k, b (jobs parked per gate kind), open (breakers not closed)
//	P tenant:<tenant>:rates          HASH  type, or "@" + concurrency key → "per_second burst" (dispatch rate limits)
//	P tenant:<tenant>:brkcfg         HASH  type (or "*") → "failures window_ms cooldown_ms"
//	P tenant:<tenant>:brk            HASH  type → "open <until_ms>" | "half <probe job id>" (not closed)
//	P tenant:<tenant>:cfg            HASH  gains rg (has rate limits) and bg (has breakers not closed)
//
// Job hashes gain: ck and cl (concurrency key and limit), gk (the gate a
// parked job waits in), gp (the gates that released it since it last
// started, one letter each), probe (1 for a half-open breaker's probe). A
// parked job's state is "parked".

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

var (
	//go:embed gates.lua
	gatesSrc string

	flowScript = redis.NewScript(fairSrc + gatesSrc + `
-- flow: ARGV[1] prefix, ARGV[2] now, ARGV[3] tenant, ARGV[4] n, n × (type
-- or "@" .. concurrency key, "per_second burst"), then m, m × (type or "*", "failures window_ms
-- cooldown_ms"): replaces the tenant's flow-control settings. Jobs parked
-- on a removed rate limit are released; a breaker whose configuration is
-- gone closes.
fair_begin(ARGV[1])
gate_begin(ARGV[1])
local now, t = tonumber(ARGV[2]), ARGV[3]
local rk, bck = GP .. 'tenant:' .. t .. ':rates', GP .. 'tenant:' .. t .. ':brkcfg'
local old = redis.call('HKEYS', rk)
redis.call('DEL', rk, bck)
local i, n = 5, tonumber(ARGV[4])
local rates = {}
for _ = 1, n do
  redis.call('HSET', rk, ARGV[i], ARGV[i + 1])
  rates[ARGV[i]] = true
  i = i + 2
end
for _, typ in ipairs(old) do
  local kind = gate_rate_kind(typ)
  if not rates[typ] and redis.call('EXISTS', gate_pk(kind, t, typ)) == 1 then gate_wake(gate_member(kind, t, typ), now) end
end
redis.call('HSET', GP .. 'tenant:' .. t .. ':cfg', 'rg', n > 0 and 1 or 0)
local m = tonumber(ARGV[i])
i = i + 1
local brk = {}
for _ = 1, m do
  redis.call('HSET', bck, ARGV[i], ARGV[i + 1])
  brk[ARGV[i]] = true
  i = i + 2
end
local h = redis.call('HGETALL', gate_brk(t))
for k = 1, #h, 2 do
  if not brk['*'] and not brk[h[k]] then
    local from = 'half_open'
    if gate_brk_state(h[k + 1]) == 'open' then from = 'open' end
    gate_brk_close(t, h[k], from, 'reset', now, 'settings')
  end
end
if n > 0 or m > 0 then redis.call('SADD', GP .. 'gates:tenants', t) else redis.call('SREM', GP .. 'gates:tenants', t) end
return 1`)

	resetScript = redis.NewScript(fairSrc + gatesSrc + `
-- reset: ARGV[1] prefix, ARGV[2] now, ARGV[3] tenant, ARGV[4] type, ARGV[5]
-- actor: closes the breaker and forgets its counted failures. Returns the
-- state it had.
fair_begin(ARGV[1])
gate_begin(ARGV[1])
local now, t, typ = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local st = redis.call('HGET', gate_brk(t), typ)
if not st then
  redis.call('DEL', gate_pk('bf', t, typ))
  return 'closed'
end
local from = 'half_open'
if gate_brk_state(st) == 'open' then from = 'open' end
gate_brk_close(t, typ, from, 'reset', now, ARGV[5])
return from`)

	claimScript = redis.NewScript(`
-- claim: ARGV[1] prefix, ARGV[2] now, ARGV[3] visibility ms, ARGV[4] max:
-- the breaker transitions due for publishing, hidden from other claims for
-- the visibility time (a replica that dies mid-publish leaves them to the
-- next claim).
local k = ARGV[1] .. 'gates:outbox'
local now = tonumber(ARGV[2])
local r = redis.call('ZRANGEBYSCORE', k, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
for _, m in ipairs(r) do redis.call('ZADD', k, now + tonumber(ARGV[3]), m) end
return r`)
)

// concurrencyArgs are the E operation's concurrency key and limit ("" when none).
func concurrencyArgs(c *schema.Concurrency) (string, string) {
	if c == nil || c.Key == "" {
		return "", ""
	}
	return c.Key, strconv.Itoa(max(c.Limit, 1))
}

// RateLimit is a dispatch rate limit: PerSecond starts per second, Burst
// at once.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// BreakerConfig configures a circuit breaker: Failures failures (of class
// app_error, retryable or timeout) within Window open it for Cooldown.
type BreakerConfig struct {
	Failures int
	Window   time.Duration
	Cooldown time.Duration
}

// FlowSettings are a tenant's flow-control settings, by job type; the
// breaker of type "*" guards every type without its own. KeyRateLimits
// are dispatch rate limits by concurrency key.
type FlowSettings struct {
	RateLimits    map[string]RateLimit
	Breakers      map[string]BreakerConfig
	KeyRateLimits map[string]RateLimit
}

// Empty reports whether f holds no setting.
func (f FlowSettings) Empty() bool {
	return len(f.RateLimits) == 0 && len(f.Breakers) == 0 && len(f.KeyRateLimits) == 0
}

// keyRateName is the name of a concurrency key's rate limit among the
// tenant's rate limits: "@" + key, which no job type (starting with a
// letter) can be.
func keyRateName(key string) string { return "@" + key }

// SetFlowControl replaces the flow-control settings of every tenant in ts,
// and clears them for the tenants that had some and are not in ts, in one
// pipelined round trip.
func (s *Store) SetFlowControl(ctx context.Context, now time.Time, ts map[string]FlowSettings) error {
	had, err := s.rdb.SMembers(ctx, s.opts.Prefix+"gates:tenants").Result()
	if err != nil {
		return fmt.Errorf("qstore: flow control: %w", err)
	}
	for _, t := range had {
		if _, ok := ts[t]; !ok {
			ts[t] = FlowSettings{}
		}
	}
	// Make sure the script is cached, then pipeline EVALSHA calls.
	if err := flowScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("qstore: flow control: %w", err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for t, f := range ts {
			if f.Empty() && !contains(had, t) {
				continue
			}
			flowScript.EvalSha(ctx, p, nil, flowArgs(s.opts.Prefix, now, t, f)...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("qstore: flow control: %w", err)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func flowArgs(prefix string, now time.Time, tenant string, f FlowSettings) []any {
	args := []any{prefix, now.UnixMilli(), tenant, len(f.RateLimits) + len(f.KeyRateLimits)}
	bucket := func(r RateLimit) string {
		return strconv.FormatFloat(r.PerSecond, 'g', -1, 64) + " " + strconv.Itoa(max(r.Burst, 1))
	}
	for typ, r := range f.RateLimits {
		args = append(args, typ, bucket(r))
	}
	for key, r := range f.KeyRateLimits {
		args = append(args, keyRateName(key), bucket(r))
	}
	args = append(args, len(f.Breakers))
	for typ, b := range f.Breakers {
		args = append(args, typ, fmt.Sprintf("%d %d %d", max(b.Failures, 1), b.Window.Milliseconds(), b.Cooldown.Milliseconds()))
	}
	return args
}

// BreakerState is a circuit breaker of one tenant and job type.
type BreakerState struct {
	Type string
	// State is schema.BreakerClosed, BreakerOpen or BreakerHalfOpen.
	State string
	// Until is when an open breaker lets a probe through.
	Until time.Time
	// Probe is the job a half-open breaker let through ("" while none runs).
	Probe string
	// Failures counted within the window (closed breakers).
	Failures int64
	// Waiting counts the jobs parked on the breaker.
	Waiting int64
	Config  BreakerConfig
}

// Breakers returns tenant's breakers: those configured for a type, and
// every one that is not closed (a type guarded by "*"), by type.
func (s *Store) Breakers(ctx context.Context, tenant string, now time.Time) ([]BreakerState, error) {
	tk := s.opts.Prefix + "tenant:" + tenant
	cfgs, err := s.rdb.HGetAll(ctx, tk+":brkcfg").Result()
	if err != nil {
		return nil, fmt.Errorf("qstore: breakers: %w", err)
	}
	states, err := s.rdb.HGetAll(ctx, tk+":brk").Result()
	if err != nil {
		return nil, fmt.Errorf("qstore: breakers: %w", err)
	}
	byType := map[string]*BreakerState{}
	for typ, c := range cfgs {
		if typ != "*" {
			byType[typ] = &BreakerState{Type: typ, State: schema.BreakerClosed, Config: parseBreakerConfig(c)}
		}
	}
	for typ, st := range states {
		b := byType[typ]
		if b == nil {
			b = &BreakerState{Type: typ, Config: parseBreakerConfig(cfgs["*"])}
			byType[typ] = b
		}
		mode, arg, _ := strings.Cut(st, " ")
		if mode == "open" {
			b.State = schema.BreakerOpen
			ms, _ := strconv.ParseInt(arg, 10, 64)
			b.Until = time.UnixMilli(ms)
		} else {
			b.State, b.Probe = schema.BreakerHalfOpen, arg
		}
	}
	out := make([]BreakerState, 0, len(byType))
	for _, b := range byType {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, s.breakerCounts(ctx, tenant, now, out)
}

// breakerCounts fills each breaker's counted failures and waiting jobs in
// one pipelined round trip.
func (s *Store) breakerCounts(ctx context.Context, tenant string, now time.Time, bs []BreakerState) error {
	if len(bs) == 0 {
		return nil
	}
	fails := make([]*redis.IntCmd, len(bs))
	waiting := make([]*redis.IntCmd, len(bs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bs {
			from := now.Add(-b.Config.Window).UnixMilli()
			fails[i] = p.ZCount(ctx, s.gateKey("bf", tenant, b.Type), strconv.FormatInt(from, 10), "+inf")
			waiting[i] = p.ZCard(ctx, s.gateKey("b", tenant, b.Type))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("qstore: breakers: %w", err)
	}
	for i := range bs {
		bs[i].Failures, bs[i].Waiting = fails[i].Val(), waiting[i].Val()
	}
	return nil
}

func (s *Store) gateKey(kind, tenant, name string) string {
	return s.opts.Prefix + "gate:" + kind + ":" + tenant + ":" + name
}

func parseBreakerConfig(c string) BreakerConfig {
	f := strings.Fields(c)
	if len(f) != 3 {
		return BreakerConfig{}
	}
	n, _ := strconv.Atoi(f[0])
	w, _ := strconv.ParseInt(f[1], 10, 64)
	cd, _ := strconv.ParseInt(f[2], 10, 64)
	return BreakerConfig{Failures: n, Window: time.Duration(w) * time.Millisecond, Cooldown: time.Duration(cd) * time.Millisecond}
}

// ResetBreaker closes tenant's breaker of type typ (its parked jobs are
// released by the next dispatch steps) and forgets its counted failures;
// it returns the state the breaker had. A change is published like any
// other transition, with actor.
func (s *Store) ResetBreaker(ctx context.Context, now time.Time, tenant, typ, actor string) (string, error) {
	v, err := resetScript.Run(ctx, s.rdb, nil, s.opts.Prefix, now.UnixMilli(), tenant, typ, actor).Text()
	if err != nil {
		return "", fmt.Errorf("qstore: reset breaker: %w", err)
	}
	return v, nil
}

// ConcurrencyState is one concurrency key of a tenant.
type ConcurrencyState struct {
	Key string
	// Limit is the limit the key's jobs carry (0 when none is known).
	Limit int
	// Running counts the jobs holding a slot (running, or admitted and about
	// to be dispatched); Waiting those parked for one.
	Running, Waiting int64
}

// concurrencyScript reads a concurrency key in one step: its slots held,
// its jobs waiting, and the limit its jobs carry (cl), read from a waiting
// job or one holding a slot. In one step because a job that ends between
// two round trips leaves a terminal marker without cl, and the key would
// show jobs running under no limit.
// KEYS: the key's wait set (its run set is KEYS[1]..':run'). ARGV: job
// key prefix. Returns {running, waiting, limit or 0}.
var concurrencyScript = redis.NewScript(`
local run = redis.call('SCARD', KEYS[1] .. ':run')
local wait = redis.call('ZCARD', KEYS[1])
local ids = redis.call('ZRANGE', KEYS[1], 0, 0)
local holder = redis.call('SRANDMEMBER', KEYS[1] .. ':run')
if holder then ids[#ids + 1] = holder end
for _, id in ipairs(ids) do
  local l = tonumber(redis.call('HGET', ARGV[1] .. id, 'cl'))
  if l then return {run, wait, l} end
end
return {run, wait, 0}`)

// Concurrency reads tenant's concurrency key.
func (s *Store) Concurrency(ctx context.Context, tenant, key string) (ConcurrencyState, error) {
	st := ConcurrencyState{Key: key}
	v, err := concurrencyScript.Run(ctx, s.rdb, []string{s.gateKey("c", tenant, key)}, s.opts.Prefix+"job:").Int64Slice()
	if err != nil {
		return st, fmt.Errorf("qstore: concurrency: %w", err)
	}
	if len(v) != 3 {
		return st, fmt.Errorf("qstore: concurrency: %d values, want 3", len(v))
	}
	st.Running, st.Waiting, st.Limit = v[0], v[1], int(v[2])
	return st, nil
}

// BreakerEvent is a breaker transition claimed from the outbox; Ack it
// once published.
type BreakerEvent struct {
	schema.BreakerChanged
	member string
}

// ClaimBreakerEvents claims up to max transitions due for publishing; they
// are claimable again after visibility unless acknowledged.
func (s *Store) ClaimBreakerEvents(ctx context.Context, now time.Time, visibility time.Duration, max int) ([]BreakerEvent, error) {
	ms, err := claimScript.Run(ctx, s.rdb, nil, s.opts.Prefix, now.UnixMilli(), visibility.Milliseconds(), max).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("qstore: claim breaker events: %w", err)
	}
	out := make([]BreakerEvent, 0, len(ms))
	for _, m := range ms {
		var raw struct {
			Tenant, Type, From, To, Reason, Actor string
			At, Failures                          int64
		}
		_, js, _ := strings.Cut(m, " ") // "<seq> <json>"
		if err := json.Unmarshal([]byte(js), &raw); err != nil {
			return nil, fmt.Errorf("qstore: claim breaker events: %w", err)
		}
		out = append(out, BreakerEvent{member: m, BreakerChanged: schema.BreakerChanged{
			TenantID: raw.Tenant, JobType: raw.Type, From: raw.From, To: raw.To, Reason: raw.Reason,
			Failures: int(raw.Failures), Actor: raw.Actor, At: time.UnixMilli(raw.At).UTC(),
		}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].member < out[j].member }) // by sequence
	return out, nil
}

// AckBreakerEvents removes published transitions from the outbox.
func (s *Store) AckBreakerEvents(ctx context.Context, evs []BreakerEvent) error {
	if len(evs) == 0 {
		return nil
	}
	ms := make([]any, len(evs))
	for i, e := range evs {
		ms[i] = e.member
	}
	if err := s.rdb.ZRem(ctx, s.opts.Prefix+"gates:outbox", ms...).Err(); err != nil {
		return fmt.Errorf("qstore: ack breaker events: %w", err)
	}
	return nil
}

// GateStats are the jobs parked per gate, and the breakers not closed,
// over every tenant (for the metrics).
type GateStats struct {
	Concurrency, Rate, Breaker int64
	OpenBreakers               int64
}

// Gates reads the gate statistics.
func (s *Store) Gates(ctx context.Context) (GateStats, error) {
	v, err := s.rdb.HMGet(ctx, s.opts.Prefix+"gates:stats", "c", "r", "b", "open", "k").Result()
	if err != nil {
		return GateStats{}, fmt.Errorf("qstore: gate stats: %w", err)
	}
	n := func(x any) int64 {
		i, _ := strconv.ParseInt(str(x), 10, 64)
		return max(i, 0)
	}
	// Rate counts the jobs held by a type's and by a key's rate limit.
	return GateStats{Concurrency: n(v[0]), Rate: n(v[1]) + n(v[4]), Breaker: n(v[2]), OpenBreakers: n(v[3])}, nil
}

// RateLimitState is a dispatch rate limit in effect for a tenant's job type
// (Type) or concurrency key (Key).
type RateLimitState struct {
	Type, Key string
	RateLimit
	// Waiting counts the jobs parked on the limit.
	Waiting int64
}

// RateLimits returns the dispatch rate limits in effect for tenant: by
// type, then by concurrency key.
func (s *Store) RateLimits(ctx context.Context, tenant string) ([]RateLimitState, error) {
	h, err := s.rdb.HGetAll(ctx, s.opts.Prefix+"tenant:"+tenant+":rates").Result()
	if err != nil {
		return nil, fmt.Errorf("qstore: rate limits: %w", err)
	}
	out := make([]RateLimitState, 0, len(h))
	for name, c := range h {
		r, b, _ := strings.Cut(c, " ")
		st, kind := RateLimitState{Type: name}, "r"
		if key, ok := strings.CutPrefix(name, keyRateName("")); ok {
			st, kind = RateLimitState{Key: key}, "k"
		}
		st.PerSecond, _ = strconv.ParseFloat(r, 64)
		st.Burst, _ = strconv.Atoi(b)
		st.Waiting, err = s.rdb.ZCard(ctx, s.gateKey(kind, tenant, name)).Result()
		if err != nil {
			return nil, fmt.Errorf("qstore: rate limits: %w", err)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[j].Type == "" || out[i].Type != "" && out[i].Type < out[j].Type
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}
