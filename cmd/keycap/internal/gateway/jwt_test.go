package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
	"github.com/keycap/keycap/internal/testkit"
)

func writePEM(t *testing.T, pub any) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	_ = os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	return f
}

func writeJWKS(t *testing.T, kid string, pub *rsa.PublicKey) string {
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	set := map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}}
	raw, _ := json.Marshal(set)
	f := filepath.Join(t.TempDir(), "jwks.json")
	_ = os.WriteFile(f, raw, 0o600)
	return f
}

// TestClaimKeys: a route keyed by a verified JWT claim, for each way to give
// the verification key. A valid token counts against its subject; a token
// that does not verify counts against the client address, never against the
// subject it claims.
func TestClaimKeys(t *testing.T) {
	t.Parallel()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	secret := "a-secret-of-at-least-thirty-two-bytes!"
	claims := func(sub string) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix(), "iss": "issuer"}
	}
	for _, tc := range []struct {
		name  string
		jwt   string
		sign  func(sub string) string
		forge func(sub string) string
	}{
		{"hs256", fmt.Sprintf("{hs256_secret: %q, issuer: issuer}", secret),
			func(sub string) string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(sub)).SignedString([]byte(secret))
				return s
			},
			func(sub string) string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(sub)).SignedString([]byte("not-the-secret-not-the-secret-!!"))
				return s
			}},
		{"rs256", fmt.Sprintf("{public_key_file: %q}", writePEM(t, &rsaKey.PublicKey)),
			func(sub string) string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(sub)).SignedString(rsaKey)
				return s
			},
			func(sub string) string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(sub)).SignedString(otherRSA)
				return s
			}},
		{"es256", fmt.Sprintf("{public_key_file: %q}", writePEM(t, &ecKey.PublicKey)),
			func(sub string) string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodES256, claims(sub)).SignedString(ecKey)
				return s
			},
			func(sub string) string {
				// The "none" algorithm: refused by every verifier.
				s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(sub)).SignedString(jwt.UnsafeAllowNoneSignatureType)
				return s
			}},
		{"jwks", fmt.Sprintf("{jwks_file: %q}", writeJWKS(t, "k1", &rsaKey.PublicKey)),
			func(sub string) string {
				tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(sub))
				tok.Header["kid"] = "k1"
				s, _ := tok.SignedString(rsaKey)
				return s
			},
			func(sub string) string {
				tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(sub))
				tok.Header["kid"] = "k1"
				s, _ := tok.SignedString(otherRSA)
				return s
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entered, release := make(chan struct{}, 4), testkit.NewGate()
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				release.Wait(20 * time.Second)
			}))
			defer up.Close()
			defer release.Open() // before up.Close: a failed test leaves no handler blocked
			cfg, err := gateway.ParseConfig("test.yaml", []byte(fmt.Sprintf(`upstream: %s
jwt: %s
routes:
  - name: api
    path: /
    limits: [{max: 1, key: "claim:sub"}]
`, up.URL, tc.jwt)))
			if err != nil {
				t.Fatal(err)
			}
			g, err := gateway.New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			srv := httptest.NewServer(g)
			defer srv.Close()
			call := func(token string) <-chan int {
				c := make(chan int, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
					req.Header.Set("Authorization", "Bearer "+token)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						c <- 0
						return
					}
					resp.Body.Close()
					c <- resp.StatusCode
				}()
				return c
			}
			const d = 10 * time.Second
			first := call(tc.sign("alice"))
			testkit.Recv(t, entered, d, "alice's request at the upstream") // alice holds her one slot
			if code := testkit.Recv(t, call(tc.sign("alice")), d, "alice's second request"); code != 429 {
				t.Fatalf("alice's second request: %d, want 429", code)
			}
			bob := call(tc.sign("bob"))
			testkit.Recv(t, entered, d, "bob's request at the upstream") // bob has his own slot
			// A forged token claiming alice is counted by address: not refused
			// for alice's slot, and alice's slot is untouched.
			forged := call(tc.forge("alice"))
			testkit.Recv(t, entered, d, "the forged request at the upstream")
			release.Open()
			for name, c := range map[string]<-chan int{"alice": first, "bob": bob, "forged": forged} {
				if code := testkit.Recv(t, c, d, name+"'s answer"); code != 200 {
					t.Errorf("%s: %d", name, code)
				}
			}
		})
	}
}

// TestNumericClaimsAreExact: ids above 2^53 keep every digit: users
// 9007199254740993 and 9007199254740992 are two users, not one.
func TestNumericClaimsAreExact(t *testing.T) {
	t.Parallel()
	secret := "0123456789abcdef0123456789abcdef"
	entered, release := make(chan struct{}, 2), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer up.Close()
	defer close(release)
	srv, _ := inProcess(t, fmt.Sprintf("upstream: %s\njwt: {hs256_secret: %s}\nroutes: [{name: r, path: /, limits: [{max: 1, key: \"claim:sub\"}]}]\n", up.URL, secret))
	token := func(sub json.Number) string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		return "Bearer " + s
	}
	go func() { _, _, _ = doGet(srv.URL+"/?hold=1", "Authorization", token("9007199254740993")) }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first request never reached the upstream")
	}
	if code, _, _ := doGet(srv.URL+"/", "Authorization", token("9007199254740992")); code != 200 {
		t.Fatalf("another user with a nearby id: %d, want 200", code)
	}
	if code, _, _ := doGet(srv.URL+"/", "Authorization", token("9007199254740993")); code != 429 {
		t.Fatalf("the same user again: %d, want 429", code)
	}
}
