package gateway

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// tokenVerifier verifies the JWT of a request and reads its claims.
type tokenVerifier struct {
	keyfunc jwt.Keyfunc
	parser  *jwt.Parser
	header  string
	cookie  string
}

func newTokenVerifier(c *JWTConfig) (*tokenVerifier, error) {
	v := &tokenVerifier{header: c.Header, cookie: c.Cookie}
	if v.header == "" {
		v.header = "Authorization"
	}
	var methods []string
	switch {
	case c.HS256Secret != "":
		secret := []byte(c.HS256Secret)
		v.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
		methods = []string{"HS256"}
	case c.PublicKeyFile != "":
		pem, err := os.ReadFile(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("jwt.public_key_file: %w", err)
		}
		if key, err := jwt.ParseRSAPublicKeyFromPEM(pem); err == nil {
			v.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
			methods = []string{"RS256"}
		} else if key, err := jwt.ParseECPublicKeyFromPEM(pem); err == nil {
			v.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
			methods = []string{"ES256"}
		} else {
			return nil, fmt.Errorf("jwt.public_key_file %s: neither an RSA nor an ECDSA public key in PEM", c.PublicKeyFile)
		}
	case c.JWKSFile != "":
		raw, err := os.ReadFile(c.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("jwt.jwks_file: %w", err)
		}
		kf, err := keyfunc.NewJWKSetJSON(json.RawMessage(raw))
		if err != nil {
			return nil, fmt.Errorf("jwt.jwks_file %s: %w", c.JWKSFile, err)
		}
		v.keyfunc = kf.Keyfunc
		methods = []string{"RS256", "ES256"}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired()}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// token returns the request's raw token, from the cookie when one is
// configured, else from the header ("Bearer <token>").
func (v *tokenVerifier) token(r *http.Request) string {
	if v.cookie != "" {
		if c, err := r.Cookie(v.cookie); err == nil {
			return c.Value
		}
		return ""
	}
	h := r.Header.Get(v.header)
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return strings.TrimSpace(h)
}

// claim returns the claim name of the request's token, as a string, when the
// token verifies; false otherwise.
func (v *tokenVerifier) claim(r *http.Request, name string) (string, bool) {
	raw := v.token(r)
	if raw == "" {
		return "", false
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc); err != nil {
		return "", false
	}
	switch c := claims[name].(type) {
	case string:
		return c, c != ""
	case float64:
		return fmt.Sprint(c), true
	case bool:
		return fmt.Sprint(c), true
	}
	return "", false
}

func tlsConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
