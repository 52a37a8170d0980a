package stickiness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
)

// The hot path of a request is Key, then Place for a key already known,
// then Acquire and Release (a multi-part request: Lookup of its pin); none of them may allocate.

func TestHotPathDoesNotAllocate(t *testing.T) {
	hdr, _ := NewExtractor([]string{"header:X-Asset-Id", "source"})
	all, _ := NewExtractor([]string{"header:X-Missing", "query:missing", "cookie:missing", "source"})
	v4 := newCtx("http://lb/ws?assetId=a", map[string]string{"X-Asset-Id": "pump-7"}, map[string]string{"FAIRLEAD_CX": "c"}, net.ParseIP("192.0.2.7"))
	v6 := newCtx("http://lb/ws", nil, nil, net.ParseIP("2001:db8:85a3::8a2e:370:7334"))
	long := newCtx("http://lb/ws", map[string]string{"X-Asset-Id": string(make([]byte, 300))}, nil, nil)
	p := newPool(threeServers...)
	tb := NewTable(TableOptions{})
	known := []byte("h:pump-7")
	tb.Place(known, p)
	buf := make([]byte, 0, 256)

	f := func(what string, fn func()) {
		t.Helper()
		fn() // let fasthttp parse headers, query and cookies once
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", what, n)
		}
	}
	f("Key from a header", func() { buf, _, _ = hdr.Key(buf[:0], v4) })
	f("Key from an IPv4 source", func() { buf, _, _ = all.Key(buf[:0], v4) })
	f("Key from an IPv6 source", func() { buf, _, _ = all.Key(buf[:0], v6) })
	f("Key from a long header value", func() { buf, _, _ = hdr.Key(buf[:0], long) })
	f("Rendezvous", func() { rendezvous(known, p, -1) })
	f("Place of a known key", func() { tb.Place(known, p) })
	other := (tb.Place(known, p) + 1) % p.Len()
	f("PlaceExcept of a known key on another server", func() { tb.PlaceExcept(known, p, other) })
	f("Acquire and Release", func() { tb.Acquire(known); tb.Release(known) })
	pins := NewTable(TableOptions{})
	pins.Pin(known, p, 1)
	f("Lookup of a known pin", func() { pins.Lookup(known, p) })
}

func BenchmarkExtractorKey(b *testing.B) {
	f := func(name string, headers map[string]string, ip string) {
		b.Run(name, func(b *testing.B) {
			e, err := NewExtractor([]string{"header:X-Asset-Id", "source"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := newCtx("http://lb/ws?x=1", headers, nil, net.ParseIP(ip))
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				buf, _, _ = e.Key(buf[:0], ctx)
			}
		})
	}
	f("header", map[string]string{"User-Agent": "edge/1.0", "X-Asset-Id": "pump-7"}, "192.0.2.7")
	f("sourceIPv4", map[string]string{"User-Agent": "edge/1.0"}, "192.0.2.7")
	f("sourceIPv6", map[string]string{"User-Agent": "edge/1.0"}, "2001:db8:85a3::8a2e:370:7334")
}

func BenchmarkTablePlaceKnownKey(b *testing.B) {
	p := newPool(threeServers...)
	tb := NewTable(TableOptions{})
	keys := make([][]byte, 10_000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("h:asset-%d", i))
		tb.Place(keys[i], p)
	}
	// Visit keys in a random order, as connections would arrive. (A fixed
	// cyclic order would always touch the least recently used entry.)
	r := rand.New(rand.NewPCG(1, 2))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = r.IntN(len(keys))
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			tb.Place(keys[order[i%len(order)]], p)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var worker atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(worker.Add(1)) * 12345 // each goroutine starts elsewhere in order
			for pb.Next() {
				tb.Place(keys[order[i%len(order)]], p)
				i++
			}
		})
	})
}

func BenchmarkRendezvous3(b *testing.B) {
	p := newPool(threeServers...)
	key := []byte("h:pump-7")
	b.ReportAllocs()
	for b.Loop() {
		rendezvous(key, p, -1)
	}
}

func BenchmarkTablePlaceNewKey(b *testing.B) {
	p := newPool(threeServers...)
	tb := NewTable(TableOptions{MaxEntries: 100_000})
	var key []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key = strconv.AppendInt(append(key[:0], "h:asset-"...), int64(i), 10)
		tb.Place(key, p)
		i++
	}
}
