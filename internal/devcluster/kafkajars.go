package devcluster

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// ApacheKafkaVersion is the Apache Kafka release StartApacheKafka runs: the
// one place it is pinned. Its jars come from Maven Central (kafka-pom.xml).
const ApacheKafkaVersion = "4.2.0"

// kafkaPom lists the broker's jars for Maven; the version is passed as
// -Dkafka.version.
//
//go:embed kafka-pom.xml
var kafkaPom []byte

// jarsMarker is written into a cache directory once every jar is in it.
const jarsMarker = ".complete"

// mavenTimeout bounds one resolution of the jars (a cold ~/.m2 downloads
// about 40 MB).
const mavenTimeout = 10 * time.Minute

// ErrNoJava and ErrNoMaven say that a tool StartApacheKafka needs is
// missing; the error wrapping them says how to install it.
var (
	ErrNoJava  = errors.New("devcluster: java not found")
	ErrNoMaven = errors.New("devcluster: mvn not found")
)

// CheckJava finds java on PATH and checks that it is version 17 or newer
// (Kafka 4's broker needs 17). It returns the path of the java binary.
func CheckJava() (string, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w on PATH: install a JDK or JRE 17+ (e.g. apt-get install openjdk-17-jre-headless) to run an Apache Kafka broker, or use the default kfake broker", ErrNoJava)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("devcluster: %s -version: %w\n%s", java, err, out)
	}
	// `openjdk version "17.0.15" 2025-04-15`, or "1.8.0_392" for Java 8.
	m := regexp.MustCompile(`version "(1\.)?(\d+)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("devcluster: cannot read the Java version from %s -version:\n%s", java, out)
	}
	if v, _ := strconv.Atoi(string(m[2])); v < 17 {
		return "", fmt.Errorf("%w: %s is Java %d, Kafka %s needs 17+ (e.g. apt-get install openjdk-17-jre-headless, then put it first on PATH)", ErrNoJava, java, v, ApacheKafkaVersion)
	}
	return java, nil
}

// KafkaJarDir returns a directory holding the jars of Apache Kafka
// ApacheKafkaVersion, resolving them from Maven Central with mvn on first
// use. KEYSHARE_KAFKA_LIB names a directory to use as is (for example a
// Kafka distribution's libs/). Otherwise the jars are cached in
// $XDG_CACHE_HOME/keyshare/kafka-VERSION/lib (~/.cache/...): resolved once,
// reused by later runs. Processes that resolve at the same time take turns
// on a lock file, and the directory appears by an atomic rename once
// complete, so a reader never sees half of it. logf, if not nil, hears what
// takes time.
func KafkaJarDir(logf func(format string, args ...any)) (string, error) {
	if dir := os.Getenv("KEYSHARE_KAFKA_LIB"); dir != "" {
		jars, _ := filepath.Glob(filepath.Join(dir, "kafka_2.13-*.jar"))
		if len(jars) == 0 {
			return "", fmt.Errorf("devcluster: KEYSHARE_KAFKA_LIB=%s holds no kafka_2.13-*.jar; point it at a Kafka distribution's libs/ or unset it", dir)
		}
		return dir, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("devcluster: no cache directory for Kafka's jars (%w); set XDG_CACHE_HOME or KEYSHARE_KAFKA_LIB", err)
	}
	base := filepath.Join(cache, "keyshare", "kafka-"+ApacheKafkaVersion)
	lib := filepath.Join(base, "lib")
	if complete(lib) {
		return lib, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("%w on PATH: install Maven 3.6+ (e.g. apt-get install maven) to fetch Kafka %s's jars from Maven Central into %s, or set KEYSHARE_KAFKA_LIB to a directory of them (a Kafka distribution's libs/)", ErrNoMaven, ApacheKafkaVersion, lib)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	unlock, err := LockFile(filepath.Join(base, ".lock"), mavenTimeout, "resolving Kafka's jars")
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(lib) { // another process resolved them while we waited
		return lib, nil
	}
	tmp, err := os.MkdirTemp(base, "resolving-")
	if err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	defer os.RemoveAll(tmp)
	pom := filepath.Join(tmp, "pom.xml")
	if err := os.WriteFile(pom, kafkaPom, 0o644); err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	out := filepath.Join(tmp, "lib")
	if logf != nil {
		logf("resolving Apache Kafka %s's jars from Maven Central into %s (once)", ApacheKafkaVersion, lib)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mavenTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", pom, "-Dkafka.version="+ApacheKafkaVersion,
		"dependency:copy-dependencies", "-DoutputDirectory="+out, "-DincludeScope=runtime")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("devcluster: resolving Kafka %s's jars with %s failed (%w); is Maven Central reachable? Its output:\n%s", ApacheKafkaVersion, mvn, err, buf.Bytes())
	}
	if err := os.WriteFile(filepath.Join(out, jarsMarker), nil, 0o644); err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	_ = os.RemoveAll(lib) // an incomplete leftover (no marker) from an older layout
	if err := os.Rename(out, lib); err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	return lib, nil
}

func complete(lib string) bool {
	_, err := os.Stat(filepath.Join(lib, jarsMarker))
	return err == nil
}

// LockFile takes an exclusive flock on path, waiting up to d: processes
// that fill one cache directory (test binaries of several packages at
// once) take turns. what names the work in the error, for the one who
// waited too long.
func LockFile(path string, d time.Duration, what string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	deadline := time.Now().Add(d)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("devcluster: lock %s (another process %s?): %w", path, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
