package otelrecordlock_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/linxGnu/grocksdb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/otelrecordlock"
)

// ExampleRegister exports a Locker's figures through an OpenTelemetry SDK MeterProvider. A
// ManualReader stands in for a real exporter (OTLP, Prometheus) so that the example can print
// what a collection holds.
func ExampleRegister() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "otelrecordlock-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	opts.Destroy()
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := recordlock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	reg, err := otelrecordlock.Register(l, mp, otelrecordlock.WithDB("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister() // runs before l.Close: defers run last in, first out

	for _, key := range []string{"order/1", "order/2"} {
		h, err := l.Lock(ctx, []byte(key), recordlock.Options{})
		if err != nil {
			log.Fatal(err)
		}
		defer h.Release()
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || (m.Name != "recordlock.locks.held" && m.Name != "recordlock.lock.acquisitions") {
				continue
			}
			for _, p := range sum.DataPoints {
				dbName, _ := p.Attributes.Value("db")
				fmt.Printf("%s{db=%s} = %d %s (monotonic: %v)\n", m.Name, dbName.AsString(), p.Value, m.Unit, sum.IsMonotonic)
			}
		}
	}
	// Output:
	// recordlock.locks.held{db=orders} = 2 {lock} (monotonic: false)
	// recordlock.lock.acquisitions{db=orders} = 2 {lock} (monotonic: true)
}
