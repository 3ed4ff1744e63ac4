package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"text/tabwriter"

	"github.com/micra-crawler/micra/delegation"
)

// The stop rule's calibration: micra stops probing once the summed
// probability that an unprobed candidate beats the best answer is under its
// risk (MicraConfig.Miss, MissFirst). Calibration runs micra as the
// simulator does and, for every round of every first decision of an
// evaluation host, sets that summed risk beside the truth — was the best
// answer so far the host's optimal crawler? A rule whose risks are
// calibrated misses, in each bin, about as often as its mean risk says.

// CalibrationEdges are the upper edges of the risk bins.
var CalibrationEdges = []float64{0.03, 0.06, 0.08, 0.1, 0.13, 0.2, 0.3, 0.5, 1, math.Inf(1)}

// calibrationRounds is how rounds are grouped: after 1, 2, and ≥ 3 probes.
const calibrationRounds = 3

// CalibrationBin counts the rounds of one bin.
type CalibrationBin struct {
	Rounds  int     `json:"rounds"`
	Missed  int     `json:"missed"`   // the best answer so far was not the optimal crawler
	RiskSum float64 `json:"risk_sum"` // sum of the rounds' risks
	Stops   int     `json:"stops"`    // rounds where the rule stopped
}

// CalibrationReport is the calibration table of one or more runs: per
// number of probes so far (1, 2, ≥ 3), per risk bin (CalibrationEdges),
// and whether the risk was the refined sum or the marginals' bound.
type CalibrationReport struct {
	Seeds   int                                 `json:"seeds"`
	Refined [calibrationRounds][]CalibrationBin `json:"refined"`
	Bound   [calibrationRounds][]CalibrationBin `json:"bound"`
}

func newCalibrationReport() *CalibrationReport {
	r := &CalibrationReport{}
	for k := range calibrationRounds {
		r.Refined[k] = make([]CalibrationBin, len(CalibrationEdges))
		r.Bound[k] = make([]CalibrationBin, len(CalibrationEdges))
	}
	return r
}

// Calibration runs micra on w with cfg (its Engine.Micra included) and
// returns its calibration table.
func (w *World) Calibration(ctx context.Context, cfg Config) (*CalibrationReport, error) {
	cfg = cfg.withDefaults()
	host := make(map[netip.Addr]int, len(w.Hosts))
	for i := len(w.Hosts) - 1; i >= 0; i-- { // the first host at an address
		host[w.Hosts[i].Addr] = i
	}
	rep := newCalibrationReport()
	rep.Seeds = 1
	observe := func(rr delegation.RoundRisk) {
		i, ok := host[rr.IP]
		if !ok || rr.Review || rr.Probes < 1 || i < cfg.Train {
			return
		}
		tab := &rep.Refined
		if rr.Bound {
			tab = &rep.Bound
		}
		b := &tab[min(rr.Probes, calibrationRounds)-1][binOf(rr.Risk)]
		b.Rounds++
		b.RiskSum += rr.Risk
		if rr.Best != w.Crawlers[w.Optimal[i]].ID {
			b.Missed++
		}
		if rr.Stop {
			b.Stops++
		}
	}
	spec, _ := LookupPolicy("micra")
	base := spec.Tweak
	spec.Tweak = func(c *delegation.Config) {
		if base != nil {
			base(c)
		}
		c.Micra.OnRound = observe
	}
	if _, err := w.runPolicy(ctx, cfg, spec); err != nil {
		return nil, err
	}
	return rep, nil
}

func binOf(risk float64) int {
	for i, e := range CalibrationEdges {
		if risk < e {
			return i
		}
	}
	return len(CalibrationEdges) - 1
}

// Add merges o's counts into r (several seeds).
func (r *CalibrationReport) Add(o *CalibrationReport) {
	r.Seeds += o.Seeds
	for k := range calibrationRounds {
		for i := range CalibrationEdges {
			for _, p := range [][2]*CalibrationBin{{&r.Refined[k][i], &o.Refined[k][i]}, {&r.Bound[k][i], &o.Bound[k][i]}} {
				p[0].Rounds += p[1].Rounds
				p[0].Missed += p[1].Missed
				p[0].RiskSum += p[1].RiskSum
				p[0].Stops += p[1].Stops
			}
		}
	}
}

// WriteText prints the table: per round group and risk bin, the rounds,
// their mean risk and the share missed (refined sums; the marginals'
// bound in a second block).
func (r *CalibrationReport) WriteText(out io.Writer) error {
	fmt.Fprintf(out, "STOP-RULE CALIBRATION (micra, %d seed(s); evaluation hosts, first decisions): every round's summed risk beside whether the best answer so far was the optimal crawler\n", r.Seeds)
	for _, part := range []struct {
		name string
		tab  *[calibrationRounds][]CalibrationBin
	}{{"refined sums", &r.Refined}, {"marginals' bound (stops only)", &r.Bound}} {
		fmt.Fprintf(out, "\n%s:\n", part.name)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "risk\tafter 1 probe: rounds\tmean risk\tmissed\tstops\tafter 2: rounds\tmean risk\tmissed\tstops\tafter ≥3: rounds\tmean risk\tmissed\tstops\t")
		lo := 0.0
		for i, e := range CalibrationEdges {
			empty := true
			for k := range calibrationRounds {
				if part.tab[k][i].Rounds > 0 {
					empty = false
				}
			}
			if !empty {
				fmt.Fprintf(tw, "%s\t", binLabel(lo, e))
				for k := range calibrationRounds {
					b := part.tab[k][i]
					if b.Rounds == 0 {
						fmt.Fprint(tw, "0\t–\t–\t–\t")
						continue
					}
					fmt.Fprintf(tw, "%d\t%.3f\t%.1f %%\t%d\t", b.Rounds, b.RiskSum/float64(b.Rounds), 100*float64(b.Missed)/float64(b.Rounds), b.Stops)
				}
				fmt.Fprintln(tw)
			}
			lo = e
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func binLabel(lo, hi float64) string {
	if math.IsInf(hi, 1) {
		return fmt.Sprintf("≥ %g", lo)
	}
	return fmt.Sprintf("%g–%g", lo, hi)
}
