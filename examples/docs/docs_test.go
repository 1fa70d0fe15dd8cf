// Package docs checks that every Go snippet in the repository's Markdown
// (README.md, CONTRIBUTING.md, docs/*.md) compiles against the code as it
// is, so that the docs cannot drift from the API.
package docs

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ambient declares what snippets use without declaring: the values an
// application already has where the snippet goes. A snippet that declares
// one of them itself shadows it.
const ambient = `
var (
	ctx      context.Context
	limiter  *keycap.Limiter
	userID   string
	tenantID string
	teamID   string
	w        http.ResponseWriter
	r        *http.Request
	mux      *http.ServeMux
	log      *slog.Logger
	err      error
)
`

// packages maps the name a snippet uses to its import path.
var packages = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "http": "net/http", "time": "time",
	"slog": "log/slog", "os": "os", "sync": "sync", "strings": "strings", "strconv": "strconv",
	"json": "encoding/json", "io": "io", "testing": "testing", "net": "net", "rand": "math/rand/v2",
	"atomic": "sync/atomic", "signal": "os/signal", "syscall": "syscall",
	"keycap":         "github.com/keycap/keycap",
	"store":          "github.com/keycap/keycap/store",
	"frontdoor":      "github.com/keycap/keycap/frontdoor",
	"memstore":       "github.com/keycap/keycap/memstore",
	"nullstore":      "github.com/keycap/keycap/nullstore",
	"storetest":      "github.com/keycap/keycap/storetest",
	"httplimit":      "github.com/keycap/keycap/httplimit",
	"joblimit":       "github.com/keycap/keycap/joblimit",
	"jobtype":        "github.com/keycap/keycap/jobtype",
	"conncap":        "github.com/keycap/keycap/conncap",
	"pushercap":      "github.com/keycap/keycap/pushercap",
	"pause":          "github.com/keycap/keycap/pause",
	"retryafter":     "github.com/keycap/keycap/retryafter",
	"keycaptest":     "github.com/keycap/keycap/keycaptest",
	"redisstore":     "github.com/keycap/keycap/redisstore",
	"pgstore":        "github.com/keycap/keycap/pgstore",
	"riverlimit":     "github.com/keycap/keycap/riverlimit",
	"asynqlimit":     "github.com/keycap/keycap/asynqlimit",
	"centrifugecap":  "github.com/keycap/keycap/centrifugecap",
	"promobserver":   "github.com/keycap/keycap/promobserver",
	"otelobserver":   "github.com/keycap/keycap/otelobserver",
	"retryablepause": "github.com/keycap/keycap/retryablepause",
	"failsafepause":  "github.com/keycap/keycap/failsafepause",
	"rpclimit":       "github.com/keycap/keycap/rpclimit",
	"grpclimit":      "github.com/keycap/keycap/grpclimit",
	"connectlimit":   "github.com/keycap/keycap/connectlimit",
	"grpc":           "google.golang.org/grpc",
	"insecure":       "google.golang.org/grpc/credentials/insecure",
	"keepalive":      "google.golang.org/grpc/keepalive",
	"connect":        "connectrpc.com/connect",
	"redis":          "github.com/redis/go-redis/v9",
	"river":          "github.com/riverqueue/river",
	"asynq":          "github.com/hibiken/asynq",
	"pgxpool":        "github.com/jackc/pgx/v5/pgxpool",
	"centrifuge":     "github.com/centrifugal/centrifuge",
	"prometheus":     "github.com/prometheus/client_golang/prometheus",
}

var fence = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippet is one ```go block of a Markdown file.
type snippet struct {
	file string
	line int
	src  string
}

func snippets(t *testing.T) []snippet {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllSubmatchIndex(b, -1) {
			out = append(out, snippet{file: filepath.Base(f), line: 1 + strings.Count(string(b[:m[2]]), "\n"), src: string(b[m[2]:m[3]])})
		}
	}
	return out
}

// wrap makes a snippet a file of package snippet: a whole file as it is;
// declarations after the imports they need; statements in a function,
// each variable they declare at the top level used once, as the code
// around them would.
func wrap(src string) string {
	trimmed := strings.TrimSpace(src)
	if strings.HasPrefix(trimmed, "package ") {
		return src
	}
	body := src
	decls := regexp.MustCompile(`(?m)^(func|type|var|const) `).MatchString(trimmed) && !startsStatement(trimmed)
	if !decls {
		body = "func _() {\n" + src + "\n" + uses(src) + "}\n"
	}
	var imports []string
	for name, path := range packages {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(src + ambient) {
			imports = append(imports, name+" "+`"`+path+`"`)
		}
	}
	slices.Sort(imports)
	return "package snippet\n\nimport (\n" + strings.Join(imports, "\n") + "\n)\n" + ambient + body
}

// startsStatement reports whether src opens with a statement rather than a
// declaration (a snippet may declare a function after some statements: it
// is then wrapped whole in a function, which fails, and says so).
func startsStatement(src string) bool {
	first := strings.SplitN(src, "\n", 2)[0]
	return !regexp.MustCompile(`^(func|type|var|const|//)`).MatchString(first)
}

// uses returns "_ = x" for each variable src declares with := at its top
// level, so that the function compiles as the code around it would.
func uses(src string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+src+"\n}", 0)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		as, ok := st.(*ast.AssignStmt)
		if !ok || as.Tok != token.DEFINE {
			continue
		}
		for _, e := range as.Lhs {
			if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
				b.WriteString("_ = " + id.Name + "\n")
			}
		}
	}
	return b.String()
}

// TestSnippetsCompile type-checks every Go snippet of the docs.
func TestSnippetsCompile(t *testing.T) {
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	for _, s := range snippets(t) {
		src := wrap(s.src)
		f, err := parser.ParseFile(fset, s.file, src, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s:%d: the snippet does not parse: %v\n%s", s.file, s.line, err, src)
			continue
		}
		var hard []string
		conf := types.Config{Importer: imp.(types.ImporterFrom), Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft {
				return // declared or imported and not used: the code around the snippet uses them
			}
			hard = append(hard, err.Error())
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
		if len(hard) > 0 {
			t.Errorf("%s:%d: the snippet does not compile:\n  %s\n--- as checked:\n%s", s.file, s.line, strings.Join(hard, "\n  "), src)
		}
	}
}
