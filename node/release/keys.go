package release

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// keyKind tags a release key file, so that no other key of micra's (a
// peer's identity, a network's pre-shared key) is ever loaded as one.
const keyKind = "micra-release-key"

// keyFile is a release key on disk (0600): its role and its Ed25519 seed.
type keyFile struct {
	Kind string `json:"kind"`
	Role string `json:"role"`
	Seed []byte `json:"ed25519_seed"`
}

// Key is one role key: its private half and the TUF key it publishes.
type Key struct {
	Role    string
	Private ed25519.PrivateKey
	Public  *metadata.Key
}

// ID is the TUF key id (the SHA-256 of the key's canonical form, hex).
func (k *Key) ID() string { return k.Public.ID() }

func newKey(role string) (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return keyOf(role, priv)
}

func keyOf(role string, priv ed25519.PrivateKey) (*Key, error) {
	pub, err := metadata.KeyFromPublicKey(priv.Public())
	if err != nil {
		return nil, err
	}
	return &Key{Role: role, Private: priv, Public: pub}, nil
}

func (k *Key) signer() (signature.Signer, error) {
	return signature.LoadSigner(k.Private, crypto.Hash(0))
}

// writeKey writes k to path (0600), refusing to overwrite a key.
func writeKey(path string, k *Key) error {
	data, err := json.MarshalIndent(keyFile{Kind: keyKind, Role: k.Role, Seed: k.Private.Seed()}, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("release key: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("release key %s: %w", path, err)
	}
	return f.Close()
}

// readKey reads a release key file; anything else is refused by name.
func readKey(path string) (*Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kf keyFile
	if err := json.Unmarshal(data, &kf); err != nil || kf.Kind != keyKind {
		return nil, fmt.Errorf("%s: not a micra release key (a release key is a JSON file of kind %q written by micra release init)", path, keyKind)
	}
	if len(kf.Seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s: ed25519_seed has %d bytes, want %d", path, len(kf.Seed), ed25519.SeedSize)
	}
	return keyOf(kf.Role, ed25519.NewKeyFromSeed(kf.Seed))
}

// readKeys reads every key file of dir (name ROLE[-N].key), by role.
func readKeys(dir string) (map[string][]*Key, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	keys := map[string][]*Key{}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".key") {
			continue
		}
		k, err := readKey(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		keys[k.Role] = append(keys[k.Role], k)
	}
	return keys, nil
}
