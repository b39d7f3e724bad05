package clientflags

// Secrets on the command line and in files: which librdkafka properties
// hold secrets (a -X flag with one is warned about: ps shows flag values),
// and warnings for a secret file, or a file of record values, that other
// users can open.

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"syscall"
)

// librdkafkaSecrets are the properties librdkafka itself marks sensitive
// (_RK_SENSITIVE in src/rdkafka_conf.c, librdkafka 2.15; it redacts their
// values in its own dumps), with the alias of one of them. Some name a
// file (ssl.key.location) or a certificate (ssl.ca.pem) rather than hold a
// secret; librdkafka treats them as sensitive, and so does keyshare.
var librdkafkaSecrets = map[string]bool{
	"ssl.key.location":               true,
	"ssl.key.password":               true,
	"ssl.key.pem":                    true,
	"ssl_key":                        true,
	"ssl.ca.pem":                     true,
	"ssl.keystore.password":          true,
	"sasl.username":                  true,
	"sasl.password":                  true,
	"sasl.oauthbearer.config":        true,
	"sasl.oauthbearer.client.secret": true,
	"sasl.oauthbearer.client.credentials.client.secret": true,
	"sasl.oauthbearer.assertion.private.key.file":       true,
	"sasl.oauthbearer.assertion.private.key.pem":        true,
	"sasl.oauthbearer.assertion.private.key.passphrase": true,
}

// secretNames catches what the list cannot know: a property of a newer
// librdkafka, or a Java client's name (sasl.jaas.config) given by habit.
var secretNames = regexp.MustCompile(`(?i)(password|passphrase|secret|private\.key|sasl\.jaas)`)

// IsSecretKey reports whether librdkafka property k holds a secret.
func IsSecretKey(k string) bool { return librdkafkaSecrets[k] || secretNames.MatchString(k) }

// WarnOpenToOthers warns when the file at path, named by flag and holding
// what, can be read or written by users other than its owner. It only
// warns: the file may be shared on purpose, and a mounted secret is often
// 0644. A file given to the process through its group is not warned about
// (openToOthers).
func WarnOpenToOthers(flag, path, what string) {
	st, err := os.Stat(path)
	if err != nil || !openToOthers(st) {
		return
	}
	fmt.Fprintf(os.Stderr, "keyshare: warning: %s %s is open to other users (mode %#o) and holds %s: chmod 600 %s\n",
		flag, path, st.Mode().Perm(), what, path)
}

// openToOthers reports whether users other than the file's owner can open
// it, leaving out a file the process reads only because its group is one of
// the process's: owned by another user, readable (not writable) by its
// group and not by others. That is how it was given to this process, as
// Kubernetes mounts a Secret with an fsGroup (owner root, group fsGroup,
// mode 0440): a warning there would be a warning on every pod's start.
func openToOthers(st fs.FileInfo) bool {
	perm := st.Mode().Perm()
	if perm&0o077 == 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || perm&0o037 != 0 || int(sys.Uid) == os.Getuid() {
		return true
	}
	return !inGroup(int(sys.Gid))
}

// inGroup reports whether gid is the process's group or one of its
// supplementary groups.
func inGroup(gid int) bool {
	if gid == os.Getgid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}
