package node

import "testing"

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"64MiB": 64 << 20, "64 MiB": 64 << 20, "1GiB": 1 << 30, "33554432": 32 << 20, "33554432B": 32 << 20,
		"40000KiB": 40000 << 10, "1TiB": 1 << 40, "off": NoMemoryLimit, "OFF": NoMemoryLimit, " 96MiB ": 96 << 20,
	} {
		if got, err := ParseMemoryLimit(in); err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64MB", "64M", "-1MiB", "0", "1.5GiB", "MiB", "16MiB", "99999999999TiB"} {
		if got, err := ParseMemoryLimit(in); err == nil {
			t.Errorf("ParseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}

func TestProcessMemoryLimit(t *testing.T) {
	def, tn := DefaultConfig(), TestnetConfig()
	if got := def.ProcessMemoryLimit(""); got != DefaultMemoryLimit {
		t.Errorf("default: %d", got)
	}
	if got := tn.ProcessMemoryLimit(""); got != TestnetMemoryLimit {
		t.Errorf("testnet: %d", got)
	}
	// GOMEMLIMIT stands when the setting is not given (0: set nothing)
	if got := def.ProcessMemoryLimit("100MiB"); got != 0 {
		t.Errorf("with GOMEMLIMIT: %d", got)
	}
	// the setting wins over GOMEMLIMIT, "off" included
	for _, lim := range []string{"128MiB", "off"} {
		c, err := File{DataDir: "d", MemoryLimit: lim}.Config()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ParseMemoryLimit(lim)
		if got := c.ProcessMemoryLimit("100MiB"); got != want {
			t.Errorf("memory_limit = %q with GOMEMLIMIT: %d, want %d", lim, got, want)
		}
	}
	if _, err := (File{DataDir: "d", MemoryLimit: "lots"}).Config(); err == nil {
		t.Error(`memory_limit = "lots" accepted`)
	}
}
