package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// landlockABI is the kernel's Landlock ABI version, or why there is none.
func landlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	return int(v), nil
}

// writeAccess are the accesses that change the filesystem, as the kernel of ABI version abi
// knows them.
func writeAccess(abi int) uint64 {
	a := uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM)
	if abi >= 2 {
		a |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		a |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return a
}

// restrictWrites has the kernel refuse this thread, and what it executes, any change to the
// filesystem outside home, /tmp and the allowed paths, and any write but to the devices of
// /dev (/dev/null, /dev/tty). It returns the ABI version it used.
func restrictWrites(home string, allowed []string) (int, error) {
	abi, err := landlockABI()
	if err != nil {
		return 0, err
	}
	handled := writeAccess(abi)
	attr := unix.LandlockRulesetAttr{Access_fs: handled}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), 8, 0) // 8: the ABI 1 size, Access_fs alone
	if errno != 0 {
		return abi, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	devices := uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE)
	if abi >= 3 {
		devices |= unix.LANDLOCK_ACCESS_FS_TRUNCATE // a shell's "> /dev/null" truncates
	}
	rules := []struct {
		path   string
		access uint64
	}{{"/tmp", handled}, {"/dev", devices}}
	for _, p := range append([]string{home}, allowed...) {
		if p != "" && unix.Access(p, unix.F_OK) == nil {
			rules = append(rules, struct {
				path   string
				access uint64
			}{p, handled})
		}
	}
	for _, r := range rules {
		if err := allow(ruleset, r.path, r.access); err != nil {
			return abi, err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return abi, fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return abi, nil
}

// allow adds to ruleset the accesses beneath path.
func allow(ruleset int, path string, access uint64) error {
	dir, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: opening %s: %w", path, err)
	}
	defer unix.Close(dir)
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(dir)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock: allowing %s: %w", path, errno)
	}
	return nil
}
