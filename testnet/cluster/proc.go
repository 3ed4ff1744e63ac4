package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/micra-crawler/micra/node"
)

// proc is one micra process of the testnet: its output goes to its log
// file, and the lines it prints on stdout are watched for the ones that
// announce its addresses.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced on each line; closed for good at exit
	done  chan struct{} // closed when the process has exited
	err   error         // its exit, once done
}

// start runs bin args, logging to logPath. The process gets SIGTERM should
// the testnet's own process die first (Pdeathsig), so no node outlives it.
func start(name, bin, logPath string, args ...string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = node.WithoutSettingsEnv(os.Environ())
	cmd.Stderr = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(lf, "# %s %s\n", bin, strings.Join(args, " "))
	p := &proc{name: name, cmd: cmd, log: lf, more: make(chan struct{}), done: make(chan struct{})}
	go p.read(out)
	return p, nil
}

// startToFile runs bin args with its stdout appended to outPath (not
// watched line by line: a subscriber's records) and its stderr to logPath.
func startToFile(name, bin, outPath, logPath string, args ...string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	of, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		lf.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = node.WithoutSettingsEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = of, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		of.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: lf, more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		of.Close()
		p.mu.Lock()
		p.err = err
		close(p.done)
		p.mu.Unlock()
		p.log.Close()
	}()
	return p, nil
}

func (p *proc) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(p.log, line)
		p.mu.Lock()
		p.lines = append(p.lines, line)
		close(p.more)
		p.more = make(chan struct{})
		p.mu.Unlock()
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err = err
	close(p.done)
	p.mu.Unlock()
	p.log.Close()
}

// await returns the first stdout line starting with prefix (without it),
// waiting for it; it fails when the process exits first or ctx ends.
func (p *proc) await(ctx context.Context, prefix string) (string, error) {
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if rest, ok := strings.CutPrefix(p.lines[seen], prefix); ok {
				p.mu.Unlock()
				return rest, nil
			}
		}
		more, done := p.more, p.done
		p.mu.Unlock()
		select {
		case <-more:
		case <-done:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if n > seen {
				continue
			}
			return "", fmt.Errorf("%s exited before printing %q (%v); its log: %s", p.name, prefix, p.exitErr(), p.log.Name())
		case <-ctx.Done():
			return "", fmt.Errorf("%s: waiting for %q: %w", p.name, prefix, ctx.Err())
		}
	}
}

// all returns every stdout line starting with prefix so far (without it).
func (p *proc) all(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. A process stopped by the signal it was sent is no error.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return p.exitErr()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM: killed (its log: %s)", p.name, grace, p.log.Name())
	}
	err := p.exitErr()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok &&
			(ws.Signaled() && ws.Signal() == syscall.SIGTERM || ws.ExitStatus() == 128+int(syscall.SIGTERM)) {
			return nil
		}
	}
	return err
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// logPath is where the process writes.
func (p *proc) logPath() string { return p.log.Name() }

func mkdir(parts ...string) (string, error) {
	d := filepath.Join(parts...)
	return d, os.MkdirAll(d, 0o755)
}

// syscallZero is the null signal: it checks a process exists.
const syscallZero = syscall.Signal(0)
