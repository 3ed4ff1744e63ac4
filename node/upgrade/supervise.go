package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Supervisor runs the node as its child process and restarts it when it
// stops to take a new release (ExitRestart). A release on trial (Pending)
// must prove healthy — its node writes the healthy marker and keeps running
// for Settle — within HealthTimeout of its first start; if it exits
// MaxStarts times first (a crash loop) or the time passes, the previous
// binary is put back (RollBack) and started. The supervisor is the binary
// that was running before the upgrade, so a new build that cannot start at
// all is undone by the old one.
type Supervisor struct {
	Exe  string   // the executable, replaced in place by Install
	Args []string // the node's arguments
	Env  []string // the node's environment (EnvSupervised is added)
	Dir  string   // the node's release directory (data_dir/release)

	HealthTimeout time.Duration // default 90 s
	Settle        time.Duration // default 10 s
	MaxStarts     int           // default 3
	StopTimeout   time.Duration // SIGTERM, then SIGKILL after this (default 15 s)

	Stdout, Stderr io.Writer
	Log            *slog.Logger
	// OnRollback is told of each rollback (nil: logged only).
	OnRollback func(Rollback)
}

func (s *Supervisor) defaults() {
	if s.HealthTimeout <= 0 {
		s.HealthTimeout = 90 * time.Second
	}
	if s.Settle <= 0 {
		s.Settle = 10 * time.Second
	}
	if s.MaxStarts <= 0 {
		s.MaxStarts = 3
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = 15 * time.Second
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Stdout == nil {
		s.Stdout = os.Stdout
	}
	if s.Stderr == nil {
		s.Stderr = os.Stderr
	}
}

// Run supervises until the node stops for good (an exit other than
// ExitRestart outside a trial) or ctx ends (the node is sent SIGTERM and
// waited for: its graceful shutdown). It returns the node's last exit
// status.
func (s *Supervisor) Run(ctx context.Context) (int, error) {
	s.defaults()
	var trial struct {
		on     bool
		p      Pending
		since  time.Time
		starts int
	}
	for {
		p, pending, err := ReadPending(s.Dir)
		if err != nil {
			return 1, err
		}
		if pending && (!trial.on || trial.p != p) {
			trial.on, trial.p, trial.since, trial.starts = true, p, time.Now(), 0
			s.Log.Info("release on trial", "from", p.From, "to", p.To, "health_timeout", s.HealthTimeout)
		} else if !pending {
			trial.on = false
		}
		if trial.on {
			trial.starts++
		}
		code, outcome, err := s.runOnce(ctx, trial.on, trial.p, trial.since)
		if err != nil {
			return 1, err
		}
		switch {
		case ctx.Err() != nil:
			return code, nil
		case outcome == outcomeHealthy:
			// confirmed while it ran (runOnce); exiting for a further
			// release put that one on trial, read at the loop's top
			trial.on = false
			if code == ExitRestart {
				continue
			}
			return code, nil
		case outcome == outcomeUnhealthy:
			s.rollBack(fmt.Sprintf("not healthy within %v of its first start", s.HealthTimeout))
			continue
		case trial.on && code != ExitRestart:
			if trial.starts >= s.MaxStarts {
				s.rollBack(fmt.Sprintf("exited %d times before it was healthy (last exit status %d)", trial.starts, code))
			}
			continue
		case code == ExitRestart:
			continue
		}
		return code, nil
	}
}

func (s *Supervisor) rollBack(reason string) {
	rb, err := RollBack(s.Dir, reason, time.Now())
	if err != nil {
		s.Log.Error("rollback failed", "err", err)
		return
	}
	s.Log.Warn("release rolled back", "version", rb.Version, "reason", rb.Reason)
	if s.OnRollback != nil {
		s.OnRollback(rb)
	}
}

type outcome int

const (
	outcomeExited    outcome = iota // the child exited (its code says how)
	outcomeHealthy                  // on trial: healthy and settled (the child may still run, or have exited later)
	outcomeUnhealthy                // on trial: the health timeout passed; the child was stopped
)

// runOnce starts the node and waits for it. On trial, it watches the
// healthy marker: once the child wrote it and ran for Settle, the trial is
// over (and runOnce keeps waiting for the child as outside a trial).
func (s *Supervisor) runOnce(ctx context.Context, onTrial bool, p Pending, since time.Time) (int, outcome, error) {
	cmd := exec.Command(s.Exe, s.Args...)
	cmd.Env = append(append([]string(nil), s.Env...), EnvSupervised+"=1")
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	if err := cmd.Start(); err != nil {
		if onTrial {
			// a binary that cannot even be executed: as a crash at start
			s.Log.Warn("node did not start", "exe", s.Exe, "err", err)
			return 127, outcomeExited, nil
		}
		return 1, outcomeExited, fmt.Errorf("upgrade: start %s: %w", s.Exe, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	status := func() int {
		var ee *exec.ExitError
		switch {
		case waitErr == nil:
			return 0
		case errors.As(waitErr, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ee.ExitCode()
		}
		return 1
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(s.StopTimeout):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	res := outcomeExited
	var poll <-chan time.Time
	var deadline <-chan time.Time
	var settled <-chan time.Time
	if onTrial {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		poll = t.C
		dl := time.NewTimer(max(0, time.Until(since.Add(s.HealthTimeout))))
		defer dl.Stop()
		deadline = dl.C
	}
	for {
		select {
		case <-exited:
			return status(), res, nil
		case <-ctx.Done():
			stop()
			return status(), res, nil
		case <-poll:
			if h, ok, _ := ReadHealthy(s.Dir); ok && h.PID == cmd.Process.Pid && h.Version == p.To {
				poll = nil
				settled = time.After(s.Settle)
			}
		case <-settled:
			res, deadline, settled = outcomeHealthy, nil, nil
			if err := Confirm(s.Dir); err != nil {
				stop()
				return status(), res, err
			}
			s.Log.Info("release healthy: confirmed", "version", p.To, "pid", cmd.Process.Pid, "previous_kept", p.Prev)
		case <-deadline:
			stop()
			return status(), outcomeUnhealthy, nil
		}
	}
}
