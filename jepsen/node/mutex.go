package node

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/recordlock/recordlock/jepsen/resource"
)

// mutexLock is the control: etcd's concurrency.Mutex with no fencing token, on a session of
// each client. A Mutex excludes sessions, not goroutines: two clients on one session would
// both hold it.
type mutexLock struct {
	cli *clientv3.Client
	ttl int

	mu       sync.Mutex // guards sessions
	sessions map[int]*concurrency.Session
}

func openMutex(cli *clientv3.Client, cfg Config) (*mutexLock, error) {
	return &mutexLock{cli: cli, ttl: int((cfg.TTL + time.Second - 1) / time.Second), sessions: make(map[int]*concurrency.Session)}, nil
}

// session returns client's live session, making a new one when the last has ended (its lease
// expired while the node was paused or cut off).
func (l *mutexLock) session(ctx context.Context, client int) (*concurrency.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sessions[client]; s != nil {
		select {
		case <-s.Done():
			delete(l.sessions, client)
		default:
			return s, nil
		}
	}
	// The lease is granted within ctx: NewSession's own grant would wait as long as etcd is away.
	lease, err := l.cli.Grant(ctx, int64(l.ttl))
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(l.ttl))
	if err != nil {
		return nil, err
	}
	l.sessions[client] = s
	return s, nil
}

func (l *mutexLock) lock(ctx context.Context, client int, key string) (held, error) {
	s, err := l.session(ctx, client)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, "/jepsen-mutex/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return mutexHeld{m}, nil
}

// lockAll locks a Mutex of each key in turn; shared is ignored: a Mutex has no shared mode, so a
// reader excludes every other holder.
func (l *mutexLock) lockAll(ctx context.Context, client int, keys []string, _ bool) (heldAll, error) {
	s, err := l.session(ctx, client)
	if err != nil {
		return nil, err
	}
	var ms mutexesHeld
	for _, k := range keys {
		m := concurrency.NewMutex(s, "/jepsen-mutex/"+k)
		if err := m.Lock(ctx); err != nil {
			ms.release()
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func (l *mutexLock) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, s := range l.sessions {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

type mutexHeld struct{ m *concurrency.Mutex }

func (mutexHeld) token() resource.Token          { return resource.Token{} }
func (mutexHeld) fence(write func() error) error { return write() }
func (h mutexHeld) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.m.Unlock(ctx)
}

// mutexesHeld is the Mutexes of lockAll, in key order.
type mutexesHeld []*concurrency.Mutex

func (ms mutexesHeld) tokens() []resource.Token { return make([]resource.Token, len(ms)) }
func (mutexesHeld) fence(f func() error) error  { return f() }
func (ms mutexesHeld) release() {
	for _, m := range ms {
		mutexHeld{m}.release()
	}
}
