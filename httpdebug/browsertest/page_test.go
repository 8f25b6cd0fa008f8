package browsertest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// hostile is the name of a Txn that would run a script if the page put it in unescaped.
const hostile = `<img src=x onerror=alert(1)>`

// screenshot is where the test saves the picture of the page that README.md shows.
var screenshot = filepath.Join("..", "..", "docs", "httpdebug.png")

// The page, opened in headless Chromium over a real RocksDB with holders, waiters and a Txn
// named like markup, lists every holder and wait, draws one edge per wait, shows the hostile
// name as text without running anything (no dialog, no console error, no exception, no log
// error such as a Content-Security-Policy violation), and shows a released lock at its next
// reload.
func TestPageInBrowser(t *testing.T) {
	clk, l := lockerOnRocksDB(t)
	ctx := context.Background()
	txn := func(name string) *recordlock.Txn {
		tx, err := l.BeginTx(recordlock.TxnOptions{Name: name})
		require.NoError(t, err)
		t.Cleanup(tx.Rollback)
		return tx
	}
	transfer, hostileTxn, report := txn("transfer-17"), txn(hostile), txn("report")
	_, err := transfer.Lock(ctx, []byte("account:1"), recordlock.Options{})
	require.NoError(t, err)
	_, err = hostileTxn.Lock(ctx, []byte("account:2"), recordlock.Options{})
	require.NoError(t, err)
	config, err := l.TryLock([]byte("config"), recordlock.Options{Hold: true})
	require.NoError(t, err)
	_, err = l.TryLock([]byte{0x00, 0xff}, recordlock.Options{})
	require.NoError(t, err)
	_, err = l.TryLock([]byte("idle"), recordlock.Options{})
	require.NoError(t, err)

	waits := []<-chan error{
		queue(t, l, 1, func() error { _, err := hostileTxn.Lock(ctx, []byte("account:1"), recordlock.Options{}); return err }),
		queue(t, l, 2, func() error { _, err := report.Lock(ctx, []byte("account:2"), recordlock.Options{}); return err }),
		queue(t, l, 3, func() error {
			h, err := l.Lock(ctx, []byte("config"), recordlock.Options{Timeout: time.Minute})
			if err == nil {
				h.Release()
			}
			return err
		}),
	}
	clk.Advance(1500 * time.Millisecond)

	srv := httptest.NewServer(httpdebug.Handler(map[string]*recordlock.Locker{"orders": l}))
	defer srv.Close()
	b := openBrowser(t)
	defer b.close()
	require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(srv.URL+"/debug/recordlock/")))

	got := b.read(t)
	first := got.Document
	assert.Equal(t, []string{"0x00ff", "account:1", "account:2", "config", "idle"}, got.LockKeys)
	assert.Equal(t, []string{"—", "transfer-17", hostile, "—", "—"}, got.LockOwners)
	assert.Equal(t, []string{"account:1", "account:2", "config"}, got.WaitKeys)
	assert.Equal(t, []string{hostile, "report", "—"}, got.WaitOwners)
	assert.Equal(t, 3, got.Edges, "an edge per wait")
	assert.Contains(t, got.NodeLabels, hostile, "the name is a node's text")
	assert.Zero(t, got.Images, "no element made from user data")
	assert.Zero(t, got.Scripts)

	shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(screenshot, shot, 0o644))

	// Release a lock: the hostile Txn gets account:1, so its wait, and the edge, go away.
	transfer.Rollback()
	require.NoError(t, done(t, waits[0]))
	deadline := time.Now().Add(20 * time.Second)
	for got = b.read(t); len(got.WaitKeys) != 2 && time.Now().Before(deadline); got = b.read(t) {
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, []string{"account:2", "config"}, got.WaitKeys, "the page reloaded with the lock released")
	assert.Equal(t, []string{"—", hostile, hostile, "—", "—"}, got.LockOwners)
	assert.Equal(t, 2, got.Edges)
	assert.NotEqual(t, first, got.Document, "the page reloaded itself")

	b.close()
	assert.Empty(t, b.problems(), "nothing ran, and the page logged no error")

	hostileTxn.Rollback()
	require.NoError(t, done(t, waits[1]))
	require.True(t, config.Release())
	require.NoError(t, done(t, waits[2]))
}

// state is what the test reads of the page.
type state struct {
	LockKeys, LockOwners []string
	WaitKeys, WaitOwners []string
	Edges                int
	NodeLabels           []string
	Images, Scripts      int
	Document             float64 // when the document loaded (performance.timeOrigin)
}

// readPage gathers the page's state as text, which is what the user sees.
const readPage = `(() => {
	const cells = (sel, col) => [...document.querySelectorAll(sel + " tbody tr")].map(r => r.cells[col].textContent);
	return {
		LockKeys: cells("table.locks", 0), LockOwners: cells("table.locks", 3),
		WaitKeys: cells("table.waits", 0), WaitOwners: cells("table.waits", 3),
		Edges: document.querySelectorAll("svg.graph g.edge").length,
		NodeLabels: [...document.querySelectorAll("svg.graph g.node text.label")].map(t => t.textContent),
		Images: document.querySelectorAll("img").length,
		Scripts: document.querySelectorAll("script").length,
		Document: performance.timeOrigin,
	};
})()`

// browser is one headless Chromium with one tab, and what the test heard from that tab.
type browser struct {
	ctx    context.Context
	cancel []context.CancelFunc
	once   sync.Once

	mu     sync.Mutex
	events []string // dialogs, console calls, exceptions and log errors
}

// openBrowser starts Chromium and opens a tab that reports every dialog, console call,
// uncaught exception and browser log error, and answers any dialog so that it cannot block the
// page.
func openBrowser(t testing.TB) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1200, 800),
		chromedp.NoSandbox, // Chromium refuses to start its sandbox as root
	)
	b := &browser{}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b.ctx, b.cancel = ctx, []context.CancelFunc{cancelTab, cancelAlloc}
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.events = append(b.events, fmt.Sprintf("dialog %s: %q", ev.Type, ev.Message))
		case *runtime.EventConsoleAPICalled:
			b.events = append(b.events, fmt.Sprintf("console.%s", ev.Type))
		case *runtime.EventExceptionThrown:
			b.events = append(b.events, "exception: "+ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				b.events = append(b.events, fmt.Sprintf("log %s %s: %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text))
			}
		}
	})
	if err != nil {
		b.close()
		t.Fatalf("starting %s: %v", path, err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

// read returns the page's state now; while the page reloads it tries again.
func (b *browser) read(t testing.TB) state {
	t.Helper()
	var err error
	for range 50 {
		var s state
		s, err = chromedp.Run(b.ctx, chromedp.Evaluate[state](readPage))
		if err == nil {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "reading the page")
	return state{}
}

// problems returns what the tab reported that a page running nothing should never cause.
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.events)
}

// close stops the browser and waits for it to exit; it may be called more than once.
func (b *browser) close() {
	b.once.Do(func() {
		_ = chromedp.Cancel(b.ctx)
		for _, cancel := range b.cancel {
			cancel()
		}
	})
}

// chromiumPath finds the Chromium binary; without one the test fails, saying how to install it.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no chromium on the PATH: `make deps` installs Debian's chromium package")
	return ""
}

// lockerOnRocksDB opens a RocksDB in a temp dir and a Locker on a ManualClock over it, so that
// no lease lapses while the browser works; all are closed at the end of the test.
func lockerOnRocksDB(t testing.TB) (*recordlock.ManualClock, *recordlock.Locker) {
	t.Helper()
	db := tempdb.New(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l, err := recordlock.New(db, recordlock.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return clk, l
}

// queue starts lock in a goroutine and waits until l lists n requests; the error of lock
// arrives on the channel returned.
func queue(t testing.TB, l *recordlock.Locker, n int, lock func() error) <-chan error {
	t.Helper()
	c := make(chan error, 1)
	go func() { c <- lock() }()
	require.Eventually(t, func() bool {
		got := 0
		for range l.Waits() {
			got++
		}
		return got == n
	}, 10*time.Second, time.Millisecond, "waiting for %d queued requests", n)
	return c
}

// done waits for the error of a lock started with queue.
func done(t testing.TB, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the lock did not return")
		return nil
	}
}
