// Command prometheus serves a recordlock.Locker's figures at /metrics through the OpenTelemetry
// Prometheus exporter while a few workers lock and release a handful of keys on a RocksDB in a
// temp dir. After -duration it scrapes its own /metrics, prints the recordlock lines and exits.
//
//	go run ./examples/prometheus -addr localhost:9464 -duration 10s
//
// While it runs, `curl localhost:9464/metrics` shows the same figures.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/otelrecordlock"
)

func main() {
	addr := flag.String("addr", "localhost:9464", "address to serve /metrics on (port 0 picks a free one)")
	duration := flag.Duration("duration", 3*time.Second, "how long to run before scraping /metrics once and exiting")
	workers := flag.Int("workers", 6, "goroutines locking and releasing keys")
	keys := flag.Int("keys", 3, "number of keys the workers contend for")
	flag.Parse()
	if err := run(*addr, *duration, *workers, *keys); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, duration time.Duration, workers, keys int) error {
	if workers < 1 || keys < 1 {
		return errors.New("-workers and -keys must be at least 1")
	}
	db, closeDB, err := openTempDB("otelrecordlock-prometheus-")
	if err != nil {
		return err
	}
	defer closeDB()
	l, err := recordlock.New(db)
	if err != nil {
		return err
	}
	defer l.Close()

	// A registry of our own, so /metrics shows the recordlock figures without the Go runtime's;
	// no target_info or otel_scope_* labels, to keep the printed sample short.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	reg, err := otelrecordlock.Register(l, mp, otelrecordlock.WithDB("demo"))
	if err != nil {
		return err
	}
	defer reg.Unregister() // runs before l.Close: defers run last in, first out

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Printf("serving %s for %v; %d workers contend for %d keys\n", url, duration, workers, keys)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { work(ctx, l, w, keys) })
	}
	time.Sleep(duration)
	sample, scrapeErr := scrape(url)
	stop()
	wg.Wait()

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if scrapeErr != nil {
		return scrapeErr
	}
	fmt.Printf("recordlock lines of %s after %v:\n%s", url, duration, sample)
	return nil
}

// work locks a random key, holds it for a few milliseconds and releases it, until ctx is done.
// Its short timeouts make some Lock calls fail with ErrTimeout, so that counter moves too.
func work(ctx context.Context, l *recordlock.Locker, id, keys int) {
	r := rand.New(rand.NewPCG(uint64(id), 1))
	for ctx.Err() == nil {
		key := fmt.Appendf(nil, "key/%d", r.IntN(keys))
		h, err := l.Lock(ctx, key, recordlock.Options{Timeout: 20 * time.Millisecond, Lease: time.Second})
		if err != nil {
			continue // ErrTimeout, or ctx ended the wait
		}
		time.Sleep(time.Duration(1+r.IntN(10)) * time.Millisecond)
		h.Release()
	}
}

// scrape fetches url and returns its lines about recordlock.
func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "recordlock_") {
			fmt.Fprintln(&b, sc.Text())
		}
	}
	return b.String(), sc.Err()
}

// openTempDB opens a new RocksDB database in a fresh temporary directory named with prefix. The
// func it returns closes the database and removes the directory.
func openTempDB(prefix string) (*grocksdb.DB, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	db, err := openDB(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// openDB opens the RocksDB database in dir, creating it if it does not exist.
func openDB(dir string) (*grocksdb.DB, error) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	return grocksdb.OpenDb(opts, dir)
}
