package synthweb

import "testing"

// RFC 9110 §12.4.2: a qvalue of 0 ("0", "0.0", "0.000") means "not
// acceptable"; acceptsGzip only recognises the exact spelling "q=0", so a
// client refusing gzip with q=0.0 gets a gzip body (Config.Gzip).
func TestAcceptsGzipQZero(t *testing.T) {
	for _, ae := range []string{"gzip;q=0", "gzip;q=0.0", "gzip; q=0.000", "identity, gzip;q=0.00"} {
		if acceptsGzip(ae) {
			t.Errorf("acceptsGzip(%q) = true, want false", ae)
		}
	}
}
