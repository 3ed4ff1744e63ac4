package search

import (
	"math/bits"
	"reflect"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/document"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

// The documents are built by hand (bleve's Batch.IndexAdvanced) rather
// than mapped from a struct: no reflection, no composite _all field, and
// the keywords' frequencies are set directly instead of repeating each
// term in a string that is tokenised again. The mapping (searchMapping)
// still says how each field is queried; buildDoc must index the fields
// as it declares them.

const (
	optIndexed = index.IndexField
	optStored  = index.StoreField
)

// buildDoc is the index's document of a log entry's page.
func buildDoc(e *sink.Entry, titleAnalyzer analysis.Analyzer) *document.Document {
	r := &e.Record
	d := document.NewDocument(r.URL)
	d.AddField(newTermsField(r.Keywords))
	d.AddField(document.NewTextFieldCustom("title", nil, []byte(r.Title), optIndexed|optStored, titleAnalyzer))
	d.AddField(document.NewTextFieldCustom("host", nil, []byte(hostOf(r.URL)), optIndexed, nil))
	d.AddField(document.NewTextFieldCustom("lang", nil, []byte(r.Lang), optStored, nil))
	d.AddField(document.NewNumericFieldWithIndexingOptions("seq", nil, float64(e.Seq), optStored))
	return d
}

// termCopies is how many times a keyword of this weight counts in its
// page's terms: 1 + log2(weight)/2, so the crawler's weight ranks the
// pages without a heavy term drowning every other.
func termCopies(weight uint32) int { return 1 + bits.Len32(weight)/2 }

// termsField is the "terms" field: the crawlers' stemmed keywords, each
// with the frequency its weight gives, lower-cased as the micra_terms
// analyzer of the mapping does to a query's terms. Indexed, not stored.
type termsField struct {
	kw     []pack.Keyword
	length int
	freqs  index.TokenFrequencies
	plain  uint64
}

func newTermsField(kw []pack.Keyword) *termsField {
	f := &termsField{kw: kw}
	for _, k := range kw {
		f.plain += uint64(len(k.Term))
	}
	return f
}

func (f *termsField) Name() string                        { return "terms" }
func (f *termsField) ArrayPositions() []uint64            { return nil }
func (f *termsField) Options() index.FieldIndexingOptions { return optIndexed }
func (f *termsField) Value() []byte                       { return nil }
func (f *termsField) NumPlainTextBytes() uint64           { return f.plain }
func (f *termsField) EncodedFieldType() byte              { return 't' }
func (f *termsField) AnalyzedLength() int                 { return f.length }
func (f *termsField) AnalyzedTokenFrequencies() index.TokenFrequencies {
	return f.freqs
}

var sizeOfTermsField = int(reflect.TypeFor[termsField]().Size())

func (f *termsField) Size() int { return sizeOfTermsField + int(f.plain) + f.freqs.Size() }

func (f *termsField) Analyze() {
	f.freqs = make(index.TokenFrequencies, len(f.kw))
	tfs := make([]index.TokenFreq, 0, len(f.kw))
	f.length = 0
	add := func(term string, n int) {
		f.length += n
		if tf, ok := f.freqs[term]; ok {
			tf.SetFrequency(tf.Frequency() + n)
			return
		}
		tfs = append(tfs, index.TokenFreq{Term: []byte(term)})
		tf := &tfs[len(tfs)-1]
		tf.SetFrequency(n)
		f.freqs[term] = tf
	}
	for _, k := range f.kw {
		n := termCopies(k.Weight)
		if plainTerm(k.Term) {
			add(k.Term, n)
			continue
		}
		// what the micra_terms analyzer (whitespace, lower case) makes of
		// it: the crawlers' terms are lower case without spaces, so this
		// is rare
		for _, t := range termsAnalyzerImpl.Analyze([]byte(k.Term)) {
			add(string(t.Term), n)
		}
	}
}

// plainTerm: ASCII, no upper case, no white space (the analyzer would
// leave it as it is).
func plainTerm(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 'A' && c <= 'Z' || c >= 0x80 {
			return false
		}
	}
	return true
}

var termsAnalyzerImpl analysis.Analyzer

func init() {
	termsAnalyzerImpl = searchMapping().AnalyzerNamed(termsAnalyzer)
}
