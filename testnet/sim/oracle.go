package sim

// The oracle bound: how accurate can a well-informed delegation rule be for
// a given number of probes per URL, when it knows everything about the world
// model except the one thing probes reveal — each (crawler, host) pair's path
// stretch? It knows every host's and crawler's exact position and access
// delay, the stretch distribution (world.Model.StretchCDF and friends) and
// the jitter model, and it learns a pair's RTT only through the simulator's
// own prober (one jittered sample per probe, as policies get them). It is a
// strong reference, not a proof: a policy knows less (registry countries, the
// positions crawlers state, probe answers), but the rule is one-step greedy,
// so a cleverer rule could do somewhat better; and a policy can remember
// answers across hosts that share a routing block (the oracle is memoryless
// per host, which matters only when hosts repeat blocks, as with
// --host-dist zipf).
//
// Decision rule (one-step Bayes-greedy), from zero probes on: before any
// probe the choice b is the crawler most likely to be nearest under the prior
// and the stop statistic is the prior's expected number of crawlers whose
// floor RTT is below b's; after each answer the oracle computes the posterior
// of every probed crawler's floor RTT (prior from the stretch distribution ×
// the exponential jitter likelihood), takes the one with the lowest posterior
// mean as b, and sums P(floor_j < floor_b | answers) over the unprobed
// crawlers j. It stops when the sum is below ε (possibly before the first
// probe: the host is delegated blind) or after K probes; otherwise it probes
// the j with the largest term (the first probe goes to the prior's choice).
// The gated variant delegates blind iff the prior's P(b nearest) ≥ τ and
// otherwise probes at least once.
//
// Every host gets its own seeded prober, and the probe order does not depend
// on ε or K, so one trace per host serves every (ε, K) row: a smaller ε
// probes a superset of the same probes with the same answers.

// OracleEps are the stop thresholds printed by default.
var OracleEps = []float64{0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005}

// OracleGates are the printed (τ, ε) pairs of the gated rule (K = all).
var OracleGates = [][2]float64{{0.9, 0.1}, {0.8, 0.2}, {0.8, 0.05}, {0.7, 0.1}}

// oracleSweepTau are the gates τ of the frontier's sweep.
var oracleSweepTau = []float64{0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98}

// oracleMaxTrace caps a host's trace (the "K = all" rows) with very many
// crawlers; the paper presets have 4 and 12.
const oracleMaxTrace = 64

// Oracle rules (OracleRow.Rule).
const (
	OracleRuleBayes      = "bayes"        // stop when Σ P(unprobed beats choice) < ε (from 0 probes on), or after K
	OracleRuleGate       = "bayes-gate"   // 0 probes iff prior P(choice nearest) ≥ τ, else bayes with ≥ 1 probe
	OracleRuleNearest    = "nearest-km"   // the nearest crawler by (expected) great-circle distance, no probe
	OracleRulePrior      = "prior-choice" // max prior P(nearest), no probe (where bayes probes first)
	OracleRuleTwoNearest = "two-nearest"  // the two lowest expected RTTs, the better answer
)

// OracleConfig tunes Oracle.
type OracleConfig struct {
	// Eps are the printed stop thresholds (nil: OracleEps).
	Eps []float64
	// Ks are the probe caps of the printed rows besides "every crawler"
	// (nil: 2).
	Ks []int
	// HostInfo is what the oracle knows of where a host is:
	// OracleHostPosition (default) or OracleHostCountry.
	HostInfo string
	// CountrySamples caps the positions that stand for one country's hosts
	// (OracleHostCountry; default 256).
	CountrySamples int
	// PoolDraws is the number of addresses drawn to learn where each
	// country's hosts are (OracleHostCountry; default 50,000).
	PoolDraws int
	// Answer, when set, answers every probe instead of the simulator's
	// prober: tests script the answers to check that the oracle's decisions
	// depend only on what it may know.
	Answer func(host int, crawler int32) (ms float64, ok bool)
}

// What the oracle knows of a host's position (OracleConfig.HostInfo).
const (
	// OracleHostPosition: the exact position.
	OracleHostPosition = "position"
	// OracleHostCountry: only the registry country of the host's subnet (as
	// a policy knows it) and the distribution of host positions in that
	// country — OracleConfig.PoolDraws addresses drawn the way uniform
	// hosts are, up to CountrySamples of them per country.
	OracleHostCountry = "country"
)

// oraclePoolDraws is the default of OracleConfig.PoolDraws.
const oraclePoolDraws = 50000

// OracleRow is one rule's point of the frontier.
type OracleRow struct {
	Rule string   `json:"oracle_rule"`
	Eps  *float64 `json:"oracle_eps"`           // nil for the fixed rules
	Tau  *float64 `json:"oracle_tau,omitempty"` // the gate (OracleRuleGate)
	K    int      `json:"oracle_k"`             // probe cap
	// OptimalPct and ProbesPerURL are over the evaluation hosts (the last
	// Hosts − Train, the same hosts as a policy's optimal %); the *All
	// fields over every host.
	OptimalPct      float64 `json:"optimal_pct"`
	ProbesPerURL    float64 `json:"probes_per_url"`
	OptimalPctAll   float64 `json:"optimal_pct_all"`
	ProbesPerURLAll float64 `json:"probes_per_url_all"`
}

// OracleSetup says which worlds an oracle report is about (printed with
// every JSON row).
type OracleSetup struct {
	Seed     uint64 `json:"seed"`
	Seeds    int    `json:"seeds"`
	Crawlers int    `json:"crawlers"`
	Hosts    int    `json:"hosts"`
	Train    int    `json:"train"`
	HostDist string `json:"host_dist"`
	HostInfo string `json:"oracle_host_info"`
}

// OracleReport is the oracle's frontier on one world (or the mean over
// seeds).
type OracleReport struct {
	OracleSetup
	// CountryFallbacks counts hosts whose country no pool address had (or
	// that have none): their prior is the country's centroid or, without a
	// country, the world's hosts (OracleHostCountry).
	CountryFallbacks int `json:"country_fallbacks,omitempty"`
	PoolDraws        int `json:"pool_draws,omitempty"`
	// Skipped says why there is no frontier (measured matrix).
	Skipped string `json:"skipped,omitempty"`
	// Rows are the printed rules; Sweep is a dense ε × K sweep that the
	// summary's frontier is built from.
	Rows  []OracleRow `json:"rows"`
	Sweep []OracleRow `json:"-"`
	// At15 is the best % optimal (evaluation hosts) at exactly 1.5
	// probes/URL and ProbesFor95 the probes/URL needed for 95 %, both on the
	// upper concave hull of Rows and Sweep (mixing two rules host by host
	// reaches every point between them); NaN when out of the hull's range.
	// (WriteJSON prints them in its summary object, NaN as null.)
	At15        float64 `json:"-"`
	ProbesFor95 float64 `json:"-"`
	// the same over every host (the oracle needs no training, so all hosts
	// are fair game and the interval is narrower)
	At15All        float64 `json:"-"`
	ProbesFor95All float64 `json:"-"`
	// MaxPct is the best % optimal of any row (the K = all, smallest ε end).
	MaxPct float64 `json:"-"`
}
