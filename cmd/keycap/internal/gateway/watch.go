package gateway

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchDebounce is how long the watcher waits after the last change it saw
// before it reloads: an editor's save or a kubelet's swap of a ConfigMap's
// files is several events, reloaded once.
const WatchDebounce = 200 * time.Millisecond

// Watch reloads the configuration whenever its file, or a file it names (a
// JWT key or JWKS file), changes — as SIGHUP does, with the same validation:
// a file that does not load keeps the configuration in force, and the log
// says why. It watches the folders of those files, not the files: an editor
// replaces a file by renaming another onto it, and Kubernetes updates a
// mounted ConfigMap or Secret by swapping a symbolic link (..data) to a new
// folder, which a watch on the old file would never see. A change is
// reloaded WatchDebounce after the last event, and only if what the files
// hold differs from what was last loaded (or failed to load): the events of
// unrelated files in those folders cost a read, not a reload. Watch
// returns once the folders are watched, or with the error that kept it from
// watching them; stop ends the watch.
func (s *Server) Watch() (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	watched := map[string]bool{}
	follow := func() error {
		for _, dir := range s.watchDirs() {
			if watched[dir] {
				continue
			}
			if err := w.Add(dir); err != nil {
				return err
			}
			watched[dir] = true
		}
		return nil
	}
	if err := follow(); err != nil {
		_ = w.Close()
		return nil, err
	}
	s.log.Info("keycap: watching the configuration for changes", "file", s.file)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case ev := <-w.Events:
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					delete(watched, ev.Name) // a watched folder that goes loses its watch
				}
				timer.Reset(WatchDebounce)
			case err := <-w.Errors:
				s.log.Warn("keycap: watching the configuration", "file", s.file, "error", err)
			case <-timer.C:
				if s.fingerprint(s.current()) != s.tried() {
					s.log.Info("keycap: configuration changed, reloading", "file", s.file)
					_ = s.Reload() // a bad file keeps the configuration in force; the log says why
				} else {
					s.log.Debug("keycap: configuration unchanged", "file", s.file)
				}
				// The files may now live elsewhere: a new ..data target, a
				// JWKS file named for the first time.
				if err := follow(); err != nil {
					s.log.Warn("keycap: watching the configuration", "file", s.file, "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-ended
		_ = w.Close()
	}, nil
}

// watchDirs returns the folders Watch watches: each file's, and that of
// the file a symbolic link leads to.
func (s *Server) watchDirs() []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(dir string) {
		if !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
	}
	for _, f := range s.configFiles(s.current()) {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		add(filepath.Dir(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			add(filepath.Dir(real))
		}
	}
	return dirs
}

// configFiles returns the configuration file and the files cfg names.
func (s *Server) configFiles(cfg *Config) []string {
	files := []string{s.file}
	if cfg == nil {
		return files
	}
	if j := cfg.JWT; j != nil {
		for _, f := range []string{j.PublicKeyFile, j.JWKSFile} {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	return files
}

// fingerprint returns a hash of what the configuration's files hold now (a
// file that cannot be read counts as its error).
func (s *Server) fingerprint(cfg *Config) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range s.configFiles(cfg) {
		raw, err := os.ReadFile(f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			h.Write([]byte("\x00missing\x00"))
		case err != nil:
			h.Write([]byte("\x00" + err.Error() + "\x00"))
		}
		h.Write(raw)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// tried returns the fingerprint of the files as the last load (or failed
// reload) read them.
func (s *Server) tried() [sha256.Size]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastTried
}

// load loads the configuration file, and records what its files held. If
// they changed while it loaded (or it names other files now), no
// fingerprint is recorded, so that the watcher's next look reloads.
func (s *Server) load() (*Config, error) {
	before := s.fingerprint(s.current())
	cfg, err := LoadConfig(s.file)
	after := before
	if cfg != nil {
		after = s.fingerprint(cfg)
	}
	s.mu.Lock()
	s.lastTried = [sha256.Size]byte{}
	if before == after {
		s.lastTried = after
	}
	s.mu.Unlock()
	return cfg, err
}

// current returns the configuration in force (nil before the first).
func (s *Server) current() *Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}
