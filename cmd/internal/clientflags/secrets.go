package clientflags

// Secrets on the command line and in files: which librdkafka properties
// hold secrets (a -X flag with one is warned about: ps shows flag values),
// and warnings for a secret file, or a file of record values, that other
// users can open.

import (
	"fmt"
	"os"
	"regexp"
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
// 0644.
func WarnOpenToOthers(flag, path, what string) {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "keyshare: warning: %s %s is open to other users (mode %#o) and holds %s: chmod 600 %s\n",
		flag, path, st.Mode().Perm(), what, path)
}
