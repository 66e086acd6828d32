// goworkload: the test suite's Go program (standard library only, any Go >= 1.19).
//
// One binary, switchable by -mode, serving net/http/pprof, a small Prometheus /metrics and its
// own counters (/stats, JSON) on 127.0.0.1:
//
//	pprof     two goroutines burning CPU in main.hashLoop and main.countPrimes, -parked goroutines
//	          parked in main.parkForever (the pprof reader's end-to-end tests)
//	cpu       -workers goroutines burning CPU in main.burnCPU
//	mutex     -workers goroutines contending on one sync.Mutex (main.lockedWork): the holder
//	          spins -spin of CPU and sleeps -hold inside the lock, everyone else queues in
//	          sync.(*Mutex).Lock
//	idle      -workers goroutines blocked on a channel receive (main.worker) waiting for jobs a
//	          producer sends at -rate per second
//	fsync     -workers goroutines writing -size bytes and fsyncing their own file in -dir
//	gc        -workers goroutines allocating short-lived garbage over a -live MiB live heap;
//	          with GOMEMLIMIT near the live heap the collector runs all the time
//	etcdload  a load client: -workers goroutines putting keys into etcd through its HTTP
//	          gateway (-endpoint), at -rate puts per second in all (0: as fast as they can)
//
// The address it listens on is printed as the first line of stdout ("127.0.0.1:PORT"). It runs
// until killed or, with -stdin-exit (the default), until its stdin closes, so a test that dies
// does not leave it behind. Mutex and block profiling are on (-mutexfraction, -blockrate).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var sink [32]byte

// Counters for /stats: the program's own account of what it did, independent of any profiler.
var (
	ops        atomic.Int64 // units of work done (lock sections, jobs, fsyncs, puts, allocations)
	lockWaitNs atomic.Int64 // time spent waiting in mu.Lock (mutex mode)
	lockWaits  atomic.Int64 // Lock calls that had to wait more than 10 us
	errorsN    atomic.Int64
	latency    = newHistogram([]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1})
)

// ------------------------------------------------------------------ pprof mode (unchanged)

//go:noinline
func hashLoop() {
	buf := make([]byte, 4096)
	for {
		for i := 0; i < 64; i++ {
			sink = sha256.Sum256(buf)
			buf[0] = sink[0]
		}
	}
}

//go:noinline
func countPrimes(limit int) int {
	n := 0
	for i := 2; i < limit; i++ {
		prime := true
		for j := 2; j*j <= i; j++ {
			if i%j == 0 {
				prime = false
				break
			}
		}
		if prime {
			n++
		}
	}
	return n
}

func primesLoop() {
	for {
		if countPrimes(200000) == 0 {
			fmt.Println("no primes")
		}
	}
}

//go:noinline
func parkForever(ch chan struct{}) {
	<-ch
}

// ------------------------------------------------------------------ cpu mode

//go:noinline
func burnCPU() {
	buf := make([]byte, 4096)
	for {
		t0 := time.Now()
		for i := 0; i < 64; i++ {
			sink = sha256.Sum256(buf)
			buf[0] = sink[0]
		}
		ops.Add(1)
		latency.observe(time.Since(t0).Seconds())
	}
}

//go:noinline
func spinFor(d time.Duration) {
	if d <= 0 {
		return
	}
	buf := make([]byte, 256)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		sink = sha256.Sum256(buf)
		buf[0] = sink[0]
	}
}

// ------------------------------------------------------------------ mutex mode

var mu sync.Mutex

//go:noinline
func lockedWork(spin, hold time.Duration) {
	t0 := time.Now()
	mu.Lock()
	waited := time.Since(t0)
	lockWaitNs.Add(int64(waited))
	if waited > 10*time.Microsecond {
		lockWaits.Add(1)
	}
	spinFor(spin)
	if hold > 0 {
		time.Sleep(hold)
	}
	mu.Unlock()
	ops.Add(1)
	latency.observe(time.Since(t0).Seconds())
}

func contend(spin, hold time.Duration) {
	for {
		lockedWork(spin, hold)
	}
}

// ------------------------------------------------------------------ idle mode

//go:noinline
func handleJob(n int) {
	buf := make([]byte, 512)
	for i := 0; i < n; i++ {
		sink = sha256.Sum256(buf)
	}
}

//go:noinline
func worker(jobs <-chan time.Time) {
	for t0 := range jobs {
		handleJob(20)
		ops.Add(1)
		latency.observe(time.Since(t0).Seconds())
	}
}

func produce(jobs chan<- time.Time, rate float64) {
	if rate <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	for t := range tick.C {
		jobs <- t
	}
}

// ------------------------------------------------------------------ fsync mode

//go:noinline
func fsyncLoop(path string, size int) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		errorsN.Add(1)
		return
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, size)
	var off int64
	for {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, off); err != nil {
			errorsN.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err := f.Sync(); err != nil {
			errorsN.Add(1)
		}
		off += int64(size)
		if off > 64<<20 {
			off = 0
		}
		ops.Add(1)
		latency.observe(time.Since(t0).Seconds())
	}
}

// ------------------------------------------------------------------ gc mode

var live [][]byte

//go:noinline
func allocLoop() {
	for {
		t0 := time.Now()
		var keep [][]byte
		for i := 0; i < 64; i++ {
			keep = append(keep, make([]byte, 16<<10))
		}
		if len(keep) == 0 {
			fmt.Println("nothing")
		}
		ops.Add(1)
		latency.observe(time.Since(t0).Seconds())
	}
}

// ------------------------------------------------------------------ etcdload mode

//go:noinline
func putLoop(client *http.Client, endpoint string, id int, every time.Duration) {
	n := 0
	for {
		t0 := time.Now()
		key := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("goworkload/%d/%d", id, n%1000)))
		val := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'v'}, 128))
		body := fmt.Sprintf(`{"key":%q,"value":%q}`, key, val)
		resp, err := client.Post(endpoint+"/v3/kv/put", "application/json", strings.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		if err != nil {
			errorsN.Add(1)
			time.Sleep(50 * time.Millisecond)
		} else {
			ops.Add(1)
			latency.observe(time.Since(t0).Seconds())
		}
		n++
		if every > 0 {
			if rest := every - time.Since(t0); rest > 0 {
				time.Sleep(rest)
			}
		}
	}
}

// ------------------------------------------------------------------ a small Prometheus registry

type histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.mu.Lock()
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.sum += v
	h.count++
	h.mu.Unlock()
}

func (h *histogram) write(w io.Writer, name, labels string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%sle=\"%g\"} %d\n", name, labels, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{%sle=\"+Inf\"} %d\n", name, labels, h.count)
	fmt.Fprintf(w, "%s_sum{%s} %g\n", name, strings.TrimSuffix(labels, ","), h.sum)
	fmt.Fprintf(w, "%s_count{%s} %d\n", name, strings.TrimSuffix(labels, ","), h.count)
}

// runtime/metrics samples exposed under client_golang's names, when this Go has them.
var runtimeMetrics = []struct{ name, prom, help, kind string }{
	{"/sched/goroutines:goroutines", "go_goroutines", "Number of goroutines that currently exist.", "gauge"},
	{"/gc/cycles/total:gc-cycles", "go_gc_cycles_total_gc_cycles_total", "Count of completed GC cycles.", "counter"},
	{"/memory/classes/heap/objects:bytes", "go_memstats_heap_inuse_bytes", "Heap bytes in use by objects.", "gauge"},
	{"/gc/heap/goal:bytes", "go_gc_heap_goal_bytes", "Heap size target for the end of the GC cycle.", "gauge"},
	{"/gc/gomemlimit:bytes", "go_gc_gomemlimit_bytes", "Go runtime memory limit (GOMEMLIMIT).", "gauge"},
	{"/gc/gogc:percent", "go_gc_gogc_percent", "Heap size target percentage (GOGC).", "gauge"},
	{"/cpu/classes/gc/total:cpu-seconds", "go_cpu_classes_gc_total_cpu_seconds_total", "Estimated CPU time spent doing GC.", "counter"},
	{"/cpu/classes/total:cpu-seconds", "go_cpu_classes_total_cpu_seconds_total", "Estimated total available CPU time.", "counter"},
	{"/sync/mutex/wait/total:seconds", "go_sync_mutex_wait_total_seconds_total", "Time goroutines spent blocked on sync.Mutex.", "counter"},
}

func writeMetrics(w http.ResponseWriter, mode string, started time.Time) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	var samples []metrics.Sample
	for _, m := range runtimeMetrics {
		if known[m.name] {
			samples = append(samples, metrics.Sample{Name: m.name})
		}
	}
	metrics.Read(samples)
	values := map[string]float64{}
	for _, s := range samples {
		switch s.Value.Kind() {
		case metrics.KindUint64:
			values[s.Name] = float64(s.Value.Uint64())
		case metrics.KindFloat64:
			values[s.Name] = s.Value.Float64()
		}
	}
	for _, m := range runtimeMetrics {
		if v, ok := values[m.name]; ok {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %g\n", m.prom, m.help, m.prom, m.kind, m.prom, v)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(w, "# HELP go_memstats_gc_cpu_fraction The fraction of this program's available CPU time used by the GC since the program started.\n# TYPE go_memstats_gc_cpu_fraction gauge\ngo_memstats_gc_cpu_fraction %g\n", ms.GCCPUFraction)
	fmt.Fprintf(w, "# HELP go_info Information about the Go environment.\n# TYPE go_info gauge\ngo_info{version=%q} 1\n", runtime.Version())
	fmt.Fprintf(w, "# HELP goworkload_ops_total Units of work done.\n# TYPE goworkload_ops_total counter\ngoworkload_ops_total{mode=%q} %d\n", mode, ops.Load())
	fmt.Fprintf(w, "# HELP goworkload_errors_total Failed units of work.\n# TYPE goworkload_errors_total counter\ngoworkload_errors_total{mode=%q} %d\n", mode, errorsN.Load())
	fmt.Fprintf(w, "# HELP goworkload_lock_wait_seconds_total Time spent waiting for the contended mutex.\n# TYPE goworkload_lock_wait_seconds_total counter\ngoworkload_lock_wait_seconds_total %g\n", float64(lockWaitNs.Load())/1e9)
	fmt.Fprintf(w, "# HELP goworkload_op_duration_seconds Duration of one unit of work.\n# TYPE goworkload_op_duration_seconds histogram\n")
	latency.write(w, "goworkload_op_duration_seconds", fmt.Sprintf("mode=%q,", mode))
	fmt.Fprintf(w, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n", started.Unix())
}

func main() {
	mode := flag.String("mode", "pprof", "pprof | cpu | mutex | idle | fsync | gc | etcdload")
	addr := flag.String("addr", "127.0.0.1:0", "address to serve pprof, /metrics and /stats on")
	parked := flag.Int("parked", 12, "pprof mode: goroutines parked in parkForever")
	workers := flag.Int("workers", 4, "goroutines doing the mode's work")
	hold := flag.Duration("hold", 2*time.Millisecond, "mutex mode: time slept while holding the lock")
	spin := flag.Duration("spin", 0, "mutex mode: CPU time spent while holding the lock")
	rate := flag.Float64("rate", 10, "idle mode: jobs per second; etcdload: puts per second (0: unthrottled)")
	dir := flag.String("dir", "", "fsync mode: directory for the files (default: a temporary directory)")
	size := flag.Int("size", 4096, "fsync mode: bytes written before each fsync")
	liveMiB := flag.Int("live", 64, "gc mode: MiB of live heap kept")
	endpoint := flag.String("endpoint", "http://127.0.0.1:2379", "etcdload mode: etcd client URL")
	mutexFraction := flag.Int("mutexfraction", 5, "runtime.SetMutexProfileFraction")
	blockRate := flag.Int("blockrate", 10000, "runtime.SetBlockProfileRate (ns)")
	stdinExit := flag.Bool("stdin-exit", true, "exit when stdin closes")
	flag.Parse()

	runtime.SetMutexProfileFraction(*mutexFraction)
	runtime.SetBlockProfileRate(*blockRate)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	started := time.Now()

	switch *mode {
	case "pprof":
		never := make(chan struct{})
		for i := 0; i < *parked; i++ {
			go parkForever(never)
		}
		go hashLoop()
		go primesLoop()
	case "cpu":
		for i := 0; i < *workers; i++ {
			go burnCPU()
		}
	case "mutex":
		for i := 0; i < *workers; i++ {
			go contend(*spin, *hold)
		}
	case "idle":
		jobs := make(chan time.Time)
		for i := 0; i < *workers; i++ {
			go worker(jobs)
		}
		go produce(jobs, *rate)
	case "fsync":
		d := *dir
		if d == "" {
			d, err = os.MkdirTemp("", "goworkload-fsync-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer os.RemoveAll(d)
		}
		for i := 0; i < *workers; i++ {
			go fsyncLoop(filepath.Join(d, fmt.Sprintf("fsync-%d.dat", i)), *size)
		}
	case "gc":
		for i := 0; i < *liveMiB; i++ {
			live = append(live, make([]byte, 1<<20))
		}
		for i := 0; i < *workers; i++ {
			go allocLoop()
		}
	case "etcdload":
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *workers}}
		var every time.Duration
		if *rate > 0 {
			every = time.Duration(float64(time.Second) * float64(*workers) / *rate)
		}
		for i := 0; i < *workers; i++ {
			go putLoop(client, strings.TrimRight(*endpoint, "/"), i, every)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown -mode %q\n", *mode)
		os.Exit(2)
	}

	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { writeMetrics(w, *mode, started) })
	http.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"mode": *mode, "workers": *workers, "ops": ops.Load(), "errors": errorsN.Load(),
			"lock_wait_seconds": float64(lockWaitNs.Load()) / 1e9, "lock_waits": lockWaits.Load(),
			"goroutines": runtime.NumGoroutine(), "gc_cycles": ms.NumGC,
			"gc_cpu_fraction": ms.GCCPUFraction, "heap_inuse": ms.HeapInuse,
			"uptime_seconds": math.Round(time.Since(started).Seconds()*1000) / 1000,
		})
	})
	if *stdinExit {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(0)
		}()
	}
	_ = http.Serve(ln, nil)
}
