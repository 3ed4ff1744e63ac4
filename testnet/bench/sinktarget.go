package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/search"
	"github.com/micra-crawler/micra/overlay"
)

// sinkTarget is the sink under measurement: in the bench's own process,
// or a separate `micra sink` process (whose memory is then its own).
type sinkTarget interface {
	addr() peer.AddrInfo
	// progress is the log's head and the full-text index's cursor (0
	// without an index).
	progress() (head, indexed uint64, err error)
	query(q, host string, limit int) (sink.Results, error)
	httpURL() string
	// cpu is the CPU time the sink's process has used, if it is not the
	// bench's (0 otherwise: the bench's own counts it).
	cpu() time.Duration
	// peakRSS is the peak resident memory (VmHWM) of the sink's process,
	// in bytes.
	peakRSS() uint64
	// peakAnonFile is the most anonymous and file-backed resident memory
	// of the sink's process seen (read every 100 ms; 0 in the bench's).
	peakAnonFile() (anon, file uint64)
	close() error
}

// inProcess is a sink in the bench's process.
type inProcess struct {
	store *sink.Store
	host  host.Host
	idx   *search.Search
	srv   *http.Server
	ln    net.Listener
	stop  func()
}

func startInProcess(ctx context.Context, dir string, o SinkOptions) (*inProcess, error) {
	quiet := slog.New(slog.DiscardHandler)
	t := &inProcess{stop: func() {}}
	var err error
	if t.store, err = sink.Open(sink.Options{Dir: filepath.Join(dir, "sink"), NoSync: o.NoSync, Logger: quiet}); err != nil {
		return nil, err
	}
	if t.host, err = overlay.NewHost(overlay.TestnetConfig()); err != nil {
		t.close()
		return nil, err
	}
	(&sink.Server{Store: t.store, Logger: quiet}).Register(t.host)
	var searcher sink.Searcher
	if o.Search {
		if t.idx, err = search.Open(t.store, filepath.Join(dir, "search"), search.Options{Shards: o.SearchShards, Logger: quiet}); err != nil {
			t.close()
			return nil, err
		}
		searcher = t.idx
		ictx, stopIndex := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { t.idx.Run(ictx) })
		t.stop = func() { stopIndex(); wg.Wait() }
	}
	if t.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.close()
		return nil, err
	}
	t.srv = &http.Server{Handler: sink.Handler(t.store, searcher, nil), ReadHeaderTimeout: 5 * time.Second}
	go t.srv.Serve(t.ln)
	return t, nil
}

func (t *inProcess) addr() peer.AddrInfo {
	return peer.AddrInfo{ID: t.host.ID(), Addrs: t.host.Addrs()}
}

func (t *inProcess) progress() (uint64, uint64, error) {
	var indexed uint64
	if t.idx != nil {
		indexed = t.idx.Indexed()
	}
	return t.store.Head(), indexed, nil
}

func (t *inProcess) query(q, host string, limit int) (sink.Results, error) {
	return t.idx.Query(q, host, limit)
}

func (t *inProcess) httpURL() string                { return "http://" + t.ln.Addr().String() }
func (t *inProcess) cpu() time.Duration             { return 0 }
func (t *inProcess) peakRSS() uint64                { return vmHWM("self") }
func (t *inProcess) peakAnonFile() (uint64, uint64) { return 0, 0 }
func (t *inProcess) close() error {
	if t.srv != nil {
		t.srv.Close()
	}
	t.stop()
	var errs []error
	if t.idx != nil {
		errs = append(errs, t.idx.Close())
	}
	if t.host != nil {
		errs = append(errs, t.host.Close())
	}
	if t.store != nil {
		errs = append(errs, t.store.Close())
	}
	return errors.Join(errs...)
}

// childProcess is a `micra sink` process the bench started: crawlers
// deliver to it over libp2p, and the bench reads its progress, its
// search and its log over HTTP, as an indexer would.
type childProcess struct {
	// the most RssAnon and RssFile seen, read every 100 ms
	mu               sync.Mutex
	maxAnon, maxFile uint64
	stopWatch        chan struct{}
	cmd              *exec.Cmd
	info             peer.AddrInfo
	http             *sink.HTTPClient
	base             string
	done             chan error
	logOut           *os.File
}

// startChild starts bin as `micra sink` on dir, on loopback ports of its
// choosing, taking carriers from any peer, and waits until it listens.
func startChild(ctx context.Context, bin, dir string, o SinkOptions) (*childProcess, error) {
	args := []string{"sink", "--data", dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0",
		"--admit", "any", "--announce=false", "--search-shards", strconv.Itoa(max(o.SearchShards, 1))}
	if o.NoSync {
		args = append(args, "--no-sync")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logOut, err := os.Create(filepath.Join(dir, "sink.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), o.SinkEnv...)
	cmd.Stderr = logOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		logOut.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logOut.Close()
		return nil, fmt.Errorf("bench sink: start %s sink: %w", bin, err)
	}
	t := &childProcess{cmd: cmd, done: make(chan error, 1), logOut: logOut}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		announced := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "sink listening "):
				ai, err := peer.AddrInfoFromString(strings.TrimPrefix(line, "sink listening "))
				if err == nil {
					t.info.ID = ai.ID
					t.info.Addrs = append(t.info.Addrs, ai.Addrs...)
				}
			case strings.HasPrefix(line, "sink streams ") && !announced:
				announced = true
				u := strings.Fields(strings.TrimPrefix(line, "sink streams "))[0]
				t.base = strings.TrimSuffix(u, "/v1/records")
				var err error
				t.http, err = sink.NewHTTPClient(t.base)
				ready <- err
			}
		}
		io.Copy(io.Discard, out)
		t.done <- cmd.Wait()
		if !announced {
			ready <- fmt.Errorf("bench sink: the sink process ended before it listened (its log: %s)", logOut.Name())
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.close()
			return nil, err
		}
	case <-time.After(time.Minute):
		t.close()
		return nil, errors.New("bench sink: the sink process did not listen within a minute")
	case <-ctx.Done():
		t.close()
		return nil, ctx.Err()
	}
	if t.info.ID == "" {
		t.close()
		return nil, errors.New("bench sink: the sink process printed no libp2p address")
	}
	t.stopWatch = make(chan struct{})
	go t.watchMemory()
	return t, nil
}

func (t *childProcess) watchMemory() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	pid := strconv.Itoa(t.cmd.Process.Pid)
	for {
		select {
		case <-t.stopWatch:
			return
		case <-tick.C:
			st := procStatus(pid)
			t.mu.Lock()
			t.maxAnon, t.maxFile = max(t.maxAnon, st["RssAnon:"]), max(t.maxFile, st["RssFile:"])
			t.mu.Unlock()
		}
	}
}

func (t *childProcess) peakAnonFile() (uint64, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxAnon, t.maxFile
}

func (t *childProcess) addr() peer.AddrInfo { return t.info }

func (t *childProcess) progress() (uint64, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := t.http.Status(ctx)
	if err != nil {
		return 0, 0, err
	}
	var indexed uint64
	if st.SearchIndexed != nil {
		indexed = *st.SearchIndexed
	}
	return st.Head, indexed, nil
}

func (t *childProcess) query(q, host string, limit int) (sink.Results, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return t.http.Search(ctx, q, host, limit)
}

func (t *childProcess) httpURL() string { return t.base }
func (t *childProcess) cpu() time.Duration {
	return procCPU(strconv.Itoa(t.cmd.Process.Pid))
}
func (t *childProcess) peakRSS() uint64 { return vmHWM(strconv.Itoa(t.cmd.Process.Pid)) }

// close interrupts the sink (it saves its page table and index) and
// waits for it; one that does not end within a minute is killed.
func (t *childProcess) close() error {
	defer t.logOut.Close()
	if t.stopWatch != nil {
		close(t.stopWatch)
	}
	_ = t.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-t.done:
		// micra exits 128+signal when a signal cut it short
		var ee *exec.ExitError
		if errors.As(err, &ee) && (ee.ExitCode() == 128+int(syscall.SIGINT) || !ee.Exited()) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bench sink: the sink process: %w (its log: %s)", err, t.logOut.Name())
		}
		return nil
	case <-time.After(time.Minute):
		_ = t.cmd.Process.Kill()
		return errors.New("bench sink: the sink process did not stop within a minute: killed")
	}
}

// vmHWM is the peak resident memory of /proc/<pid> ("self": this
// process), in bytes; 0 where /proc is not.
func vmHWM(pid string) uint64 { return procStatus(pid)["VmHWM:"] }

// procStatus reads the sizes of /proc/<pid>/status, in bytes, by name
// ("VmHWM:", "RssAnon:", …).
func procStatus(pid string) map[string]uint64 {
	out := map[string]uint64{}
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			out[f[0]] = kb << 10
		}
	}
	return out
}

// procCPU is the CPU time (user + system) of /proc/<pid>, counted in
// the kernel's clock ticks of 1/100 s; 0 where /proc is not.
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// the fields after the command's name, which is in parentheses
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100)
}
