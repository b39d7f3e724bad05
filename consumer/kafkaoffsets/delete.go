package kafkaoffsets

/*
#include <stdint.h>
#include <stdlib.h>

// librdkafka's C API as rdkafka.h declares it (stable across 2.x). The
// library is linked into every keyshare binary by confluent-kafka-go, which
// wraps no call that deletes a group's offsets (OffsetDelete, KIP-496).
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_op_s rd_kafka_event_t;
typedef struct rd_kafka_AdminOptions_s rd_kafka_AdminOptions_t;
typedef struct rd_kafka_DeleteConsumerGroupOffsets_s rd_kafka_DeleteConsumerGroupOffsets_t;
typedef struct rd_kafka_group_result_s rd_kafka_group_result_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef int rd_kafka_resp_err_t;

typedef struct rd_kafka_topic_partition_s {
	char *topic;
	int32_t partition;
	int64_t offset;
	void *metadata;
	size_t metadata_size;
	void *opaque;
	rd_kafka_resp_err_t err;
	void *_private;
} rd_kafka_topic_partition_t;

typedef struct rd_kafka_topic_partition_list_s {
	int cnt;
	int size;
	rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t errstr_size);
void rd_kafka_conf_destroy(rd_kafka_conf_t *conf);
rd_kafka_t *rd_kafka_new(int type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);
void rd_kafka_destroy(rd_kafka_t *rk);
rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk);
void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu);
rd_kafka_event_t *rd_kafka_queue_poll(rd_kafka_queue_t *rkqu, int timeout_ms);
void rd_kafka_event_destroy(rd_kafka_event_t *rkev);
rd_kafka_resp_err_t rd_kafka_event_error(rd_kafka_event_t *rkev);
const char *rd_kafka_event_error_string(rd_kafka_event_t *rkev);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
rd_kafka_AdminOptions_t *rd_kafka_AdminOptions_new(rd_kafka_t *rk, int for_api);
rd_kafka_resp_err_t rd_kafka_AdminOptions_set_request_timeout(rd_kafka_AdminOptions_t *options, int timeout_ms, char *errstr, size_t errstr_size);
void rd_kafka_AdminOptions_destroy(rd_kafka_AdminOptions_t *options);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int size);
rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *rktparlist, const char *topic, int32_t partition);
void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *rkparlist);
rd_kafka_DeleteConsumerGroupOffsets_t *rd_kafka_DeleteConsumerGroupOffsets_new(const char *group, const rd_kafka_topic_partition_list_t *partitions);
void rd_kafka_DeleteConsumerGroupOffsets_destroy(rd_kafka_DeleteConsumerGroupOffsets_t *del_grpoffsets);
void rd_kafka_DeleteConsumerGroupOffsets(rd_kafka_t *rk, rd_kafka_DeleteConsumerGroupOffsets_t **del_grpoffsets, size_t del_grpoffsets_cnt, const rd_kafka_AdminOptions_t *options, rd_kafka_queue_t *rkqu);
const rd_kafka_event_t *rd_kafka_event_DeleteConsumerGroupOffsets_result(rd_kafka_event_t *rkev);
const rd_kafka_group_result_t **rd_kafka_DeleteConsumerGroupOffsets_result_groups(const rd_kafka_event_t *result, size_t *cntp);
const rd_kafka_error_t *rd_kafka_group_result_error(const rd_kafka_group_result_t *groupres);
const rd_kafka_topic_partition_list_t *rd_kafka_group_result_partitions(const rd_kafka_group_result_t *groupres);
const char *rd_kafka_error_string(const rd_kafka_error_t *error);
rd_kafka_resp_err_t rd_kafka_error_code(const rd_kafka_error_t *error);

// RD_KAFKA_CONSUMER, the member's own kind of client, so that its consumer
// settings raise no warning; RD_KAFKA_ADMIN_OP_ANY.
enum { consumerType = 1, adminOpAny = 0 };

static rd_kafka_topic_partition_t *partitionAt(const rd_kafka_topic_partition_list_t *l, int i) { return &l->elems[i]; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
)

// Delete deletes group's committed offsets of parts in one OffsetDelete
// request (KIP-496, what kafka-consumer-groups --delete-offsets sends),
// through librdkafka's rd_kafka_DeleteConsumerGroupOffsets on a
// short-lived client made from cm (the member's Kafka settings; keys
// starting with "go." are the Go client's and left out). A broker accepts
// it for a group with no live Kafka members, which a keyshare group is.
// refused holds the partitions the broker answered with an error; err is
// an error of the request as a whole.
func Delete(ctx context.Context, cm kafka.ConfigMap, group string, parts []assign.TopicPartition) (refused map[assign.TopicPartition]error, err error) {
	if len(parts) == 0 {
		return nil, nil
	}
	errstr := (*C.char)(C.malloc(512))
	defer C.free(unsafe.Pointer(errstr))
	rk, err := newClient(cm, errstr)
	if err != nil {
		return nil, err
	}
	defer C.rd_kafka_destroy(rk)
	queue := C.rd_kafka_queue_new(rk)
	defer C.rd_kafka_queue_destroy(queue)

	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	opts := C.rd_kafka_AdminOptions_new(rk, C.adminOpAny)
	defer C.rd_kafka_AdminOptions_destroy(opts)
	if e := C.rd_kafka_AdminOptions_set_request_timeout(opts, C.int(max(1, timeout.Milliseconds())), errstr, 512); e != 0 {
		return nil, fmt.Errorf("kafkaoffsets: request timeout %s: %s", timeout, C.GoString(errstr))
	}
	list := C.rd_kafka_topic_partition_list_new(C.int(len(parts)))
	defer C.rd_kafka_topic_partition_list_destroy(list)
	for _, p := range parts {
		ct := C.CString(p.Topic)
		C.rd_kafka_topic_partition_list_add(list, ct, C.int32_t(p.Partition))
		C.free(unsafe.Pointer(ct))
	}
	cg := C.CString(group)
	del := C.rd_kafka_DeleteConsumerGroupOffsets_new(cg, list)
	C.free(unsafe.Pointer(cg))
	defer C.rd_kafka_DeleteConsumerGroupOffsets_destroy(del)
	dels := (**C.rd_kafka_DeleteConsumerGroupOffsets_t)(C.malloc(C.size_t(unsafe.Sizeof(del))))
	defer C.free(unsafe.Pointer(dels))
	*dels = del
	C.rd_kafka_DeleteConsumerGroupOffsets(rk, dels, 1, opts, queue)

	// The answer comes on the queue; poll in short waits so that ctx can
	// end it (librdkafka also ends it at the request timeout).
	var ev *C.rd_kafka_event_t
	for ev == nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kafkaoffsets: delete the offsets of %d partitions of group %q: %w", len(parts), group, err)
		}
		ev = C.rd_kafka_queue_poll(queue, 100)
	}
	defer C.rd_kafka_event_destroy(ev)
	if e := C.rd_kafka_event_error(ev); e != 0 {
		return nil, fmt.Errorf("kafkaoffsets: delete the offsets of %d partitions of group %q: %w", len(parts), group,
			kafka.NewError(kafka.ErrorCode(e), C.GoString(C.rd_kafka_event_error_string(ev)), false))
	}
	result := C.rd_kafka_event_DeleteConsumerGroupOffsets_result(ev)
	if result == nil {
		return nil, errors.New("kafkaoffsets: delete offsets: librdkafka answered with another kind of event")
	}
	var n C.size_t
	groups := C.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result, &n)
	if n != 1 {
		return nil, fmt.Errorf("kafkaoffsets: delete offsets: %d group results, want 1", n)
	}
	gr := *groups
	if gerr := C.rd_kafka_group_result_error(gr); gerr != nil {
		return nil, fmt.Errorf("kafkaoffsets: delete the offsets of %d partitions of group %q: %w", len(parts), group,
			kafka.NewError(kafka.ErrorCode(C.rd_kafka_error_code(gerr)), C.GoString(C.rd_kafka_error_string(gerr)), false))
	}
	refused = make(map[assign.TopicPartition]error)
	if pl := C.rd_kafka_group_result_partitions(gr); pl != nil {
		for i := range int(pl.cnt) {
			p := C.partitionAt(pl, C.int(i))
			if p.err != 0 {
				refused[assign.TopicPartition{Topic: C.GoString(p.topic), Partition: int32(p.partition)}] = kafka.NewError(kafka.ErrorCode(p.err), C.GoString(C.rd_kafka_err2str(p.err)), false)
			}
		}
	}
	return refused, nil
}

// newClient makes the short-lived librdkafka client of a Delete from cm
// (keys starting with "go." are the Go client's and left out), with
// errstr, 512 bytes, for librdkafka's error text. The caller destroys it.
func newClient(cm kafka.ConfigMap, errstr *C.char) (*C.rd_kafka_t, error) {
	conf := C.rd_kafka_conf_new()
	for k, v := range cm {
		if strings.HasPrefix(k, "go.") {
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case bool, int, int32, int64, float64:
			s = fmt.Sprint(v)
		default:
			C.rd_kafka_conf_destroy(conf)
			return nil, fmt.Errorf("kafkaoffsets: Kafka setting %s: a %T cannot be passed to librdkafka", k, v)
		}
		ck, cv := C.CString(k), C.CString(s)
		res := C.rd_kafka_conf_set(conf, ck, cv, errstr, 512)
		C.free(unsafe.Pointer(ck))
		C.free(unsafe.Pointer(cv))
		if res != 0 {
			C.rd_kafka_conf_destroy(conf)
			return nil, fmt.Errorf("kafkaoffsets: Kafka setting %s=%q: %s", k, s, C.GoString(errstr))
		}
	}
	rk := C.rd_kafka_new(C.consumerType, conf, errstr, 512) // owns conf from here, if it succeeds
	if rk == nil {
		C.rd_kafka_conf_destroy(conf)
		return nil, fmt.Errorf("kafkaoffsets: Kafka client: %s", C.GoString(errstr))
	}
	return rk, nil
}
