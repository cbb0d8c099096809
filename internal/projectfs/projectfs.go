// Package projectfs resolves the paths of files inside a project folder without leaving it.
//
// The folder is often a cloned repository, and a repository can hold symlinks: a .vscode
// that links to ~/.config/Code/User, or a .dsh/mcp.json that links to a file of the user's
// elsewhere. Reading or writing such a path as it is would read or write a file the user never
// meant to hand to the project. Resolve walks the path one component at a time, and follows a
// symlink only when it leads to a place inside the folder: a link between two files of the
// project (one config shared by two clients, or a ConfigMap's ..data links) keeps working,
// and any other link is refused, naming it and where it points.
package projectfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LinkError is the refusal of a symlink on the way to a project file.
type LinkError struct {
	// Link is the symlink, relative to the project folder (".vscode", ".dsh/mcp.json").
	Link string
	// Target is where it points: the link's text, and what it resolves to when that differs.
	Target string
	// Dangling is true when the link resolves to nothing; otherwise it leads out of the folder.
	Dangling bool
}

func (e *LinkError) Error() string {
	if e.Dangling {
		return fmt.Sprintf("%s is a symlink to %s, which does not exist", e.Link, e.Target)
	}
	return fmt.Sprintf("%s is a symlink to %s, outside the project folder", e.Link, e.Target)
}

// NotRegularError is the refusal of a project file that exists and is not a regular file (a
// directory, a FIFO that would block a read, a device).
type NotRegularError struct {
	Path string // relative to the project folder
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is not a regular file (%s)", e.Path, e.Mode.Type())
}

// Resolve is the real path of rel (a relative path such as ".vscode/mcp.json") inside the
// project folder dir: every symlink on the way resolved, each checked to lead to a place
// inside the folder (the folder itself may be, or lie under, a symlink: it is resolved
// first). A path whose end does not exist yet resolves to where it will be created, under
// the last component that exists. A symlink that leads out of the folder, or to nothing, is a
// *LinkError; an existing file that is not a regular file is a *NotRegularError.
func Resolve(dir, rel string) (string, error) {
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s is not a path inside the project folder", rel)
	}
	root, err := realDir(dir)
	if err != nil {
		return "", err
	}
	parts := strings.Split(filepath.Clean(rel), string(filepath.Separator))
	cur := root
	for i, part := range parts {
		next := filepath.Join(cur, part)
		shown := filepath.Join(parts[:i+1]...)
		info, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return filepath.Join(append([]string{next}, parts[i+1:]...)...), nil
		case err != nil:
			return "", err
		case info.Mode()&fs.ModeSymlink != 0:
			if next, err = follow(root, next, shown); err != nil {
				return "", err
			}
			if info, err = os.Stat(next); err != nil {
				return "", err
			}
		}
		if i == len(parts)-1 && !info.Mode().IsRegular() {
			return "", &NotRegularError{Path: shown, Mode: info.Mode()}
		}
		cur = next
	}
	return cur, nil
}

// realDir is the project folder with every symlink resolved; a folder that does not exist yet
// is its absolute path (nothing in it can be a link).
func realDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return abs, nil
	}
	return real, err
}

// follow is where the symlink link (shown as shown) leads, when that is inside root.
func follow(root, link, shown string) (string, error) {
	text, err := os.Readlink(link)
	if err != nil {
		return "", err
	}
	target, err := filepath.EvalSymlinks(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &LinkError{Link: shown, Target: text, Dangling: true}
	}
	if err != nil {
		return "", fmt.Errorf("%s is a symlink to %s: %w", shown, text, err)
	}
	if !Inside(root, target) {
		where := text
		if target != text {
			where += " (" + target + ")"
		}
		return "", &LinkError{Link: shown, Target: where}
	}
	return target, nil
}

// Inside reports whether path is root or lies under it, by their cleaned names.
func Inside(root, path string) bool {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	return err == nil && filepath.IsLocal(rel)
}
