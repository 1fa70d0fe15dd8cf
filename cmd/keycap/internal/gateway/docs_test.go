package gateway_test

import (
	"crypto/rand"
	"crypto/rsa"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

// TestDocumentedConfigsAreValid parses every YAML block of the README and
// docs/gateway.md as a configuration (a partial one with an upstream and a
// jwt section added), so that the documentation cannot drift from the
// validator.
func TestDocumentedConfigsAreValid(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "secret")
	t.Setenv("PUSHER_SECRET", "secret")
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	jwks := writeJWKS(t, "docs", &key.PublicKey)
	for _, file := range []string{"../../../../README.md", "../../../../docs/gateway.md", "../../../../examples/gateway.yaml"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks := []string{string(raw)}
		if strings.HasSuffix(file, ".md") {
			blocks = nil
			for _, m := range block.FindAllStringSubmatch(string(raw), -1) {
				blocks = append(blocks, m[1])
			}
		}
		if len(blocks) == 0 {
			t.Errorf("%s: no YAML blocks", file)
		}
		for i, b := range blocks {
			if !strings.Contains(b, "upstream:") {
				b = "upstream: http://127.0.0.1:3000\n" + b
			}
			if strings.Contains(b, "claim:") && !strings.Contains(b, "jwt:") {
				b = "jwt: {hs256_secret: 0123456789abcdef0123456789abcdef}\n" + b
			}
			b = strings.ReplaceAll(b, "/etc/keycap/jwks.json", jwks) // a file the test has
			if _, err := gateway.ParseConfig(file, []byte(b)); err != nil {
				t.Errorf("%s, block %d:\n%s\n%v", file, i+1, b, err)
			}
		}
	}
}
