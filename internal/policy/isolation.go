package policy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/dsh-dev/projectmcp/internal/sandbox"
)

// Isolation is what a server gets from the controller, and what it may reach through it. The
// controller holds every project's secrets and, in a cluster, a ServiceAccount token that can
// read Secrets: a server process must start from nothing of the controller's but what is
// listed here, and a remote server's URL must not be a way into the controller's network.
type Isolation struct {
	// PassEnv names variables of the controller's environment that stdio servers get, besides
	// PassedEnv (PATH, LANG, TMPDIR). A name the controller has no value for is left out.
	PassEnv []string
	// Home, when set, is every stdio server's HOME (dev: the user's own, where npx and uvx
	// keep their caches). When empty each server process gets a directory of its own, created
	// empty (mode 0700, owned by Credential's user) before it starts and removed when it ends.
	Home string
	// Credential, when not nil, is the user and groups stdio servers run as; the controller
	// needs NeededCapabilities for it (CheckCapabilities), not root as such.
	Credential *syscall.Credential
	// Egress, when not nil, is where HTTP and SSE servers may be reached; nil admits any URL.
	Egress *Egress
	// Sandbox, when not nil, puts every stdio server in a sandbox of its own (Begin). The
	// servers of a project then run as a uid of the project's own where the sandbox has them,
	// as Credential otherwise.
	Sandbox *sandbox.Sandbox
}

// PassedEnv are the variables of the controller's environment every stdio server gets: what
// a command needs to be found and to print, nothing that identifies or authorizes anyone.
var PassedEnv = []string{"PATH", "LANG", "TMPDIR"}

// Env is a stdio server's whole environment: the passed-through variables of the controller's
// own environment, HOME, then the configured entries (which win over both).
func (iso *Isolation) Env(home string, configured []string) []string {
	var env []string
	for _, name := range slices.Concat(PassedEnv, iso.PassEnv) {
		if v, ok := os.LookupEnv(name); ok && name != "HOME" {
			env = append(env, name+"="+v)
		}
	}
	env = append(env, "HOME="+home)
	env = append(env, configured...)
	return dedupEnv(env)
}

// dedupEnv keeps the last entry of each name, in the order of first appearance, so that the
// child sees exactly one value per name.
func dedupEnv(env []string) []string {
	last := map[string]int{}
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	out := make([]string, 0, len(last))
	seen := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !seen[name] {
			seen[name] = true
			out = append(out, env[last[name]])
		}
	}
	return out
}

// MakeHome returns the HOME of a server process about to start, and a function that removes
// it (a no-op for a shared Home).
func (iso *Isolation) MakeHome(server string) (string, func(), error) {
	return iso.makeHome(server, iso.Credential)
}

// makeHome is MakeHome for a process run as cred.
func (iso *Isolation) makeHome(server string, cred *syscall.Credential) (string, func(), error) {
	if iso.Home != "" {
		return iso.Home, func() {}, nil
	}
	prefix := "projectmcp-home-" + server + "-"
	if cred == nil {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			return "", nil, fmt.Errorf("creating the server's HOME: %w", err)
		}
		return filepath.Clean(dir), func() { _ = os.RemoveAll(dir) }, nil
	}
	home, name, root, err := otherUsersHomes.make(prefix)
	if err != nil {
		return "", nil, fmt.Errorf("creating the server's HOME: %w", err)
	}
	var once sync.Once // the count of HOMEs is right only if each goes once
	remove := func() {
		once.Do(func() {
			// What the server left is its user's, possibly unwritable to the controller's.
			_ = reclaim(root, name)
			_ = root.RemoveAll(name)
			otherUsersHomes.release()
		})
	}
	if err := root.Lchown(name, int(cred.Uid), int(cred.Gid)); err != nil {
		remove()
		return "", nil, fmt.Errorf("handing the server's HOME to uid %d: %w", cred.Uid, err)
	}
	return home, remove, nil
}

// otherUsersHomes holds the HOMEs of servers run as another user.
var otherUsersHomes homesDir

// homesDir is a directory of the controller's, mode 0711 in the temporary directory, that
// HOMEs are made in: a server enters its own HOME but can neither list the others nor rename,
// replace or remove its HOME's entry. The directory's own entry it can replace (the temporary
// directory may be writable by every user without the sticky bit, as a Kubernetes emptyDir
// is), so the controller works on HOMEs through the directory it opened (an os.Root), never
// by their paths: what it chowns, chmods and removes is in the directory it made, whatever
// its name comes to point at, and a link in a HOME never leads it out. It exists while it
// holds a HOME.
type homesDir struct {
	mu    sync.Mutex
	dir   string   // its path, for the servers' HOME variables
	root  *os.Root // the directory itself
	homes int
}

// make makes a HOME named prefix and a random suffix, and the directory first if need be
// (again if another hand, a cleaner of the temporary directory, removed it). It returns the
// HOME's path, its name in the directory and the directory.
func (h *homesDir) make(prefix string) (home, name string, root *os.Root, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for attempt := 0; attempt < 8; attempt++ {
		if h.root == nil {
			if err := h.open(); err != nil {
				return "", "", nil, err
			}
		}
		name = prefix + randomSuffix()
		err = h.root.Mkdir(name, 0o700)
		switch {
		case errors.Is(err, fs.ErrNotExist): // the directory is gone: make another
			h.root.Close()
			h.root, h.dir = nil, ""
			continue
		case errors.Is(err, fs.ErrExist):
			continue
		case err != nil:
			return "", "", nil, err
		}
		h.homes++
		return filepath.Join(h.dir, name), name, h.root, nil
	}
	return "", "", nil, fmt.Errorf("no free name for a HOME in %s", h.dir)
}

// open makes the directory and opens it. Callers hold h.mu.
func (h *homesDir) open() error {
	dir, err := os.MkdirTemp("", "projectmcp-homes-")
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err == nil {
		err = root.Chmod(".", 0o711)
	}
	if err != nil {
		if root != nil {
			root.Close()
		}
		_ = os.Remove(dir)
		return err
	}
	h.dir, h.root = filepath.Clean(dir), root
	return nil
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand never fails
	return hex.EncodeToString(b)
}

// release is called once a HOME made here was removed; the last one takes the directory with
// it (left in place if something else is in it, or if its name now points elsewhere).
func (h *homesDir) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.homes--; h.homes > 0 {
		return
	}
	if at, err := os.Lstat(h.dir); err == nil {
		if own, err := h.root.Stat("."); err == nil && os.SameFile(at, own) {
			_ = os.Remove(h.dir)
		}
	}
	h.root.Close()
	h.root, h.dir = nil, ""
}

// ValidEnvName reports whether name can be passed through as an environment variable: not
// empty, no '=' and no NUL.
func ValidEnvName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}
