// Package history records the harness's operations and checks them: porcupine over a model of a
// register with fenced writes, a count of lost updates, and the bank's total in every read.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
)

// Outcome is how an operation ended.
type Outcome string

// The outcomes of an operation.
const (
	OK      Outcome = "ok"      // the write was applied
	Fail    Outcome = "fail"    // nothing was written: the lock, the read or the write was refused
	Unknown Outcome = "unknown" // the write was sent and no answer came
)

// Phase is which step of an operation an Event records.
type Phase string

// The phases of an operation, in order. An operation that has a Read event may have sent its
// write; one without it never did.
const (
	Invoke   Phase = "invoke"
	Read     Phase = "read"
	Complete Phase = "complete"
)

// Event is one line of a node's history log. Op is unique across the run and is also the value
// the operation writes.
type Event struct {
	Op      int64   `json:"op"`
	Client  int     `json:"client"`
	Key     string  `json:"key"`
	Phase   Phase   `json:"phase"`
	Time    int64   `json:"t"` // Unix nanoseconds
	Token   uint64  `json:"token,omitempty"`
	Value   int64   `json:"value,omitempty"` // the value read, in a Read event
	Outcome Outcome `json:"outcome,omitempty"`
	Cause   string  `json:"cause,omitempty"` // why it failed or is unknown, in a few words
	Error   string  `json:"error,omitempty"`
}

// Log appends Events to a file, one JSON line each written with a single write, so that a node
// killed with SIGKILL leaves every line it wrote whole.
type Log struct {
	mu sync.Mutex // serializes writes to f
	f  *os.File
}

// OpenLog opens path for appending, creating it if needed.
func OpenLog(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &Log{f: f}, nil
}

// Append writes e.
func (l *Log) Append(e Event) error { return l.append(e) }

// AppendBank writes e.
func (l *Log) AppendBank(e BankEvent) error { return l.append(e) }

func (l *Log) append(e any) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }

// ReadEvents parses a log. A last line cut short, as a kill can leave it, is dropped.
func ReadEvents(r io.Reader) ([]Event, error) { return readLines[Event](r) }

// ReadBankEvents parses a bank log as ReadEvents parses a log.
func ReadBankEvents(r io.Reader) ([]BankEvent, error) { return readLines[BankEvent](r) }

func readLines[E any](r io.Reader) ([]E, error) {
	var events []E
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending error
	for sc.Scan() {
		if pending != nil {
			return nil, pending
		}
		var e E
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			pending = fmt.Errorf("history: line %d: %w", len(events)+1, err)
			continue
		}
		events = append(events, e)
	}
	return events, sc.Err()
}
