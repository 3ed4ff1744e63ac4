// Command micra is the single binary of the micra peer-to-peer, location-aware
// web crawler: node, hierarchy tools, simulator, crawler and benchmarks.
//
// Each subcommand lives in its own file and registers itself on rootCmd in an
// init function, so the packages behind them stay independent.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

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
	rootCmd.PersistentFlags().BoolP("verbose", "v", false, "debug logging")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "micra:", err)
		os.Exit(1)
	}
}
