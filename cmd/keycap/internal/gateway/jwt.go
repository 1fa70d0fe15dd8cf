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

// fieldError is a problem of one field of the jwt section.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return "jwt." + e.field + ": " + e.err.Error() }

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
			return nil, &fieldError{"public_key_file", err}
		}
		if key, err := jwt.ParseRSAPublicKeyFromPEM(pem); err == nil {
			v.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
			methods = []string{"RS256"}
		} else if key, err := jwt.ParseECPublicKeyFromPEM(pem); err == nil {
			v.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
			methods = []string{"ES256"}
		} else {
			return nil, &fieldError{"public_key_file", fmt.Errorf("%s: neither an RSA nor an ECDSA public key in PEM", c.PublicKeyFile)}
		}
	case c.JWKSFile != "":
		raw, err := os.ReadFile(c.JWKSFile)
		if err != nil {
			return nil, &fieldError{"jwks_file", err}
		}
		kf, err := keyfunc.NewJWKSetJSON(json.RawMessage(raw))
		if err != nil {
			return nil, &fieldError{"jwks_file", fmt.Errorf("%s: %w", c.JWKSFile, err)}
		}
		v.keyfunc = kf.Keyfunc
		methods = []string{"RS256", "ES256"}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithJSONNumber()}
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
// configured, else from the header ("Bearer <token>", the scheme in any
// case, or the bare token).
func (v *tokenVerifier) token(r *http.Request) string {
	if v.cookie != "" {
		if c, err := r.Cookie(v.cookie); err == nil {
			return c.Value
		}
		return ""
	}
	h := strings.TrimSpace(r.Header.Get(v.header))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return h
}

// claims returns the scalar claims of the request's token, each as a string
// (numbers exactly as written: an id above 2^53 keeps every digit), when the
// token verifies; nil otherwise.
func (v *tokenVerifier) claims(r *http.Request) map[string]string {
	if v == nil {
		return nil
	}
	raw := v.token(r)
	if raw == "" {
		return nil
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc); err != nil {
		return nil
	}
	out := make(map[string]string, len(claims))
	for name, c := range claims {
		switch c := c.(type) {
		case string:
			if c != "" {
				out[name] = c
			}
		case json.Number:
			out[name] = c.String()
		case bool:
			out[name] = fmt.Sprint(c)
		}
	}
	return out
}

func tlsConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
