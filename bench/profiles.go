package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/pprof/profile"
)

// startProfile fetches a CPU and an allocation profile of the serving
// process over d (and a CPU profile of its broker; with -trace, a runtime
// trace of the serving process), in the background; the returned func
// waits.
func (b *Bench) startProfile(ctx context.Context, name string, d time.Duration) func() {
	if b.profile == "" || b.t.Pprof == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	cpu := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds()))
	wg.Go(func() { b.saveProfile(name+"-cpu.pb.gz", func() ([]byte, error) { return fetch(ctx, b.t.Pprof, cpu) }) })
	wg.Go(func() {
		b.saveProfile(name+"-allocs.pb.gz", func() ([]byte, error) { return allocsDuring(ctx, b.t.Pprof, d) })
	})
	if b.trace {
		tr := fmt.Sprintf("/debug/pprof/trace?seconds=%d", int(d.Seconds()))
		wg.Go(func() { b.saveProfile(name+"-trace.out", func() ([]byte, error) { return fetch(ctx, b.t.Pprof, tr) }) })
	}
	if b.t.BrokerPprof != "" {
		wg.Go(func() {
			b.saveProfile(name+"-broker-cpu.pb.gz", func() ([]byte, error) { return fetch(ctx, b.t.BrokerPprof, cpu) })
		})
	}
	return wg.Wait
}

// saveProfile writes what get returns to file in the profile directory; a
// profile that cannot be had is logged, not fatal.
func (b *Bench) saveProfile(file string, get func() ([]byte, error)) {
	data, err := get()
	if err == nil {
		err = os.WriteFile(filepath.Join(b.profile, file), data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(b.log, "profile:", file+":", err)
		return
	}
	fmt.Fprintln(b.log, "profile written:", filepath.Join(b.profile, file))
}

// allocsDuring is what the process allocated over d: the difference of two
// heap profiles each taken after a forced collection. The runtime publishes
// its allocation counts at the end of a collection, so a profile is up to
// two collections old; pprof's own delta (/debug/pprof/allocs?seconds=)
// subtracts two such profiles, and in a sitting, where a workload follows
// one that allocated far more, it counted the earlier workload's last
// collections' worth as this one's (a 1k/s profile after a 100k run showed
// 190 KB per job against 60 KB on a fresh stack). The two collections cost
// the process a few milliseconds each.
func allocsDuring(ctx context.Context, addr string, d time.Duration) ([]byte, error) {
	const heap = "/debug/pprof/heap?gc=1"
	before, err := fetchProfile(ctx, addr, heap)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(d):
	}
	after, err := fetchProfile(ctx, addr, heap)
	if err != nil {
		return nil, err
	}
	delta, err := profileDelta(before, after)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = delta.Write(&buf)
	return buf.Bytes(), err
}

// profileDelta is after − before: the samples' values counted between the
// two (for a heap profile, the alloc_* values; its inuse_* values become a
// difference too, which means nothing and is what pprof's own delta gives).
// Its default sample is alloc_space, as /debug/pprof/allocs's is. Neither
// argument is changed.
func profileDelta(before, after *profile.Profile) (*profile.Profile, error) {
	negated := before.Copy()
	negated.Scale(-1)
	delta, err := profile.Merge([]*profile.Profile{negated, after})
	if err != nil {
		return nil, err
	}
	delta.TimeNanos = after.TimeNanos
	delta.DurationNanos = after.TimeNanos - before.TimeNanos
	delta.DefaultSampleType = "alloc_space"
	return delta, nil
}

// fetchProfile GETs a profile from the pprof server at addr; its TimeNanos
// is when the server wrote it.
func fetchProfile(ctx context.Context, addr, path string) (*profile.Profile, error) {
	data, err := fetch(ctx, addr, path)
	if err != nil {
		return nil, err
	}
	return profile.ParseData(data)
}

// fetch GETs path from the pprof server at addr.
func fetch(ctx context.Context, addr, path string) ([]byte, error) {
	return getOK(ctx, http.DefaultClient, "http://"+addr+path, "")
}
