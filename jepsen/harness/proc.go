// Package harness runs the processes of a test: three etcd members, the resource, the nodes
// and their fault proxies, and drives the nemesis schedule against them.
package harness

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Procs starts processes and kills every one it started: each runs in a process group of its
// own, gets SIGKILL if the harness dies (Pdeathsig), and is killed by KillAll on every exit
// path of the harness.
type Procs struct {
	mu  sync.Mutex // guards all
	all map[*Proc]struct{}
}

// NewProcs returns an empty Procs.
func NewProcs() *Procs { return &Procs{all: make(map[*Proc]struct{})} }

// Proc is one process, restartable with the same command line.
type Proc struct {
	Name string
	path string
	args []string
	log  string
	ps   *Procs

	mu       sync.Mutex // guards cmd, done, expected and unplanned
	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // the harness stopped or killed it
	// unplanned counts the times it exited without the harness asking.
	unplanned int
}

// Start starts path with args, its output appended to logPath.
func (ps *Procs) Start(name, path string, args []string, logPath string) (*Proc, error) {
	p := &Proc{Name: name, path: path, args: args, log: logPath, ps: ps}
	if err := p.start(); err != nil {
		return nil, err
	}
	ps.mu.Lock()
	ps.all[p] = struct{}{}
	ps.mu.Unlock()
	return p, nil
}

func (p *Proc) start() error {
	out, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.expected = cmd, done, false
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		if !p.expected {
			p.unplanned++
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Restart starts the process again with the same command line, after it has exited.
func (p *Proc) Restart(args ...string) error {
	if args != nil {
		p.args = args
	}
	return p.start()
}

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	return syscall.Kill(-pid, sig)
}

// Kill sends the process's group SIGKILL and waits for it to exit.
func (p *Proc) Kill() {
	p.mu.Lock()
	p.expected = true
	pid, done := p.cmd.Process.Pid, p.done
	p.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
}

// Stop resumes the process if it was stopped, sends SIGTERM, and kills it if it has not
// exited within grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	p.expected = true
	done := p.done
	p.mu.Unlock()
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Unplanned returns how many times the process exited without the harness asking.
func (p *Proc) Unplanned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unplanned
}

// KillAll kills every process started, and waits for each.
func (ps *Procs) KillAll() {
	ps.mu.Lock()
	all := ps.all
	ps.all = make(map[*Proc]struct{})
	ps.mu.Unlock()
	for p := range all {
		p.Kill()
	}
}
