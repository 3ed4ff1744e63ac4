// Command micra is the single binary of the micra peer-to-peer, location-aware
// web crawler: node, hierarchy tools, simulator, crawler and benchmarks.
//
// Each subcommand lives in its own file and registers itself on rootCmd in an
// init function, so the packages behind them stay independent.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	golog "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/gologshim"
	"github.com/spf13/cobra"
)

var logLevel = new(slog.LevelVar)

var rootCmd = &cobra.Command{
	Use:           "micra",
	Short:         "micra — a peer-to-peer, location-aware web crawler",
	SilenceUsage:  true,
	SilenceErrors: true,
	// The embedded data's licences ask for attribution with every copy; the
	// top-level help says where it is.
	Long: `micra — a peer-to-peer, location-aware web crawler.

The binary embeds third-party data (IP hierarchy, DB-IP geolocation, country
centroids) under CC BY 4.0 and BSD licences; "micra licenses" prints their
attributions.`,
	PersistentPreRun: func(cmd *cobra.Command, args []string) {
		if verbose, _ := cmd.Flags().GetBool("verbose"); verbose {
			logLevel.Set(slog.LevelDebug)
		}
	},
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})))
	// libp2p logs through go-log, as the DHT and pubsub do: one set of
	// levels (GOLOG_LOG_LEVEL, default error) and one format for all three.
	gologshim.SetDefaultHandler(golog.SlogHandler())
	rootCmd.PersistentFlags().BoolP("verbose", "v", false, "debug logging")
	ctx, stop := notifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCmd.ExecuteContext(ctx)
	var in interrupted
	if err != nil && errors.As(context.Cause(ctx), &in) && !errors.As(err, new(interrupted)) {
		// a command cut short by the signal that says only "context
		// canceled" (sim, bench, …): name the signal, and exit with it
		err = fmt.Errorf("%w: %w", in, err)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "micra:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is the process status for a command's error: the status it
// names (ExitCode, e.g. a supervised node's), 128+n when a signal n stopped
// the command and it says so (an error wrapping an interrupted, e.g. 130
// for SIGINT, as shells report it), else 1.
func exitCode(err error) int {
	var st interface{ ExitCode() int }
	if errors.As(err, &st) {
		return st.ExitCode()
	}
	var in interrupted
	if errors.As(err, &in) {
		if s, ok := in.sig.(syscall.Signal); ok {
			return 128 + int(s)
		}
	}
	return 1
}

// interrupted is the cause (context.Cause) of the command context's end when
// a signal stopped micra. A command that was cut short returns an error
// wrapping it, and main exits with 128+signal.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string {
	switch e.sig {
	case os.Interrupt:
		return "interrupted (SIGINT)"
	case syscall.SIGTERM:
		return "interrupted (SIGTERM)"
	}
	return "interrupted (" + e.sig.String() + ")"
}

// notifyContext is signal.NotifyContext, but the context's cause is an
// interrupted naming the signal, so commands can report it and main can
// map it to an exit status.
func notifyContext(parent context.Context, sigs ...os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		select {
		case s := <-ch:
			cancel(interrupted{s})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(context.Canceled)
	}
}
