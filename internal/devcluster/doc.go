// Package devcluster starts the in-process infrastructure keyshare uses for
// its tests and its bundled demo: an embedded etcd server and kfake, an
// in-process Kafka wire-protocol broker from franz-go.
//
// It is not for production. It exists so that tests and `keyshare cluster`
// share one way of starting both servers on free ports:
//
//	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: dir})
//	defer e.Close()
//	k, err := devcluster.StartKafka(devcluster.KafkaOptions{Topics: map[string]int32{"orders": 3}})
//	defer k.Close()
//	brokers := k.ListenAddrs()[0]
//
// StartCluster starts the two together on one data directory, with kfake
// or Apache Kafka as the broker: the bundled cluster of `keyshare cluster`,
// `keyshare demo` and keyshare-bench.
//
// For fault-injection tests, StartEtcdCluster runs several etcd members in
// the process, which a test can stop, restart and cut off from each other.
//
// StartApacheKafka runs a real Apache Kafka (ApacheKafkaVersion, KRaft) as
// child JVMs, one or three nodes that can be killed and restarted, for the
// second test tier and `keyshare cluster --kafka apache`; its jars come from
// Maven Central (kafka-pom.xml, KafkaJarDir). See docs/compatibility.md.
package devcluster
