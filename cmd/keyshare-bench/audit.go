package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/cmd/internal/clientflags"
)

// auditLog records every etcd write of this process that etcd accepted,
// with the revision it got: one JSON line per write, appended before the
// caller sees the answer. The fault matrix (chaos/) replays etcd's history
// against it to prove that no write from a fenced member or a deposed
// leader was accepted; an operator can use it the same way.
type auditLog struct {
	member string
	mu     sync.Mutex
	f      *os.File
}

// auditLine is one accepted write: the keys it put, at revision Rev.
type auditLine struct {
	Member string   `json:"member"`
	Rev    int64    `json:"rev"`
	Puts   []string `json:"puts"`
}

// openAuditLog opens the log, creating it readable by this user only.
func openAuditLog(path, member string) (*auditLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--audit %s: %w", path, err)
	}
	clientflags.WarnOpenToOthers("--audit", path, "the group's etcd writes")
	return &auditLog{member: member, f: f}, nil
}

func (a *auditLog) close() error { return a.f.Close() }

// interceptor is a gRPC client interceptor that logs the puts of
// successful transactions and plain puts. Writes whose answer never
// arrived are not logged: the log holds what the process knows was
// accepted.
func (a *auditLog) interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		var line auditLine
		switch r := reply.(type) {
		case *pb.TxnResponse:
			ops := req.(*pb.TxnRequest).Success
			if !r.Succeeded {
				ops = req.(*pb.TxnRequest).Failure
			}
			for _, op := range ops {
				if p := op.GetRequestPut(); p != nil {
					line.Puts = append(line.Puts, string(p.Key))
				}
			}
			line.Rev = r.Header.GetRevision()
		case *pb.PutResponse:
			line.Puts, line.Rev = []string{string(req.(*pb.PutRequest).Key)}, r.Header.GetRevision()
		}
		if len(line.Puts) == 0 {
			return nil
		}
		line.Member = a.member
		b, _ := json.Marshal(line)
		a.mu.Lock()
		defer a.mu.Unlock()
		_, err := a.f.Write(append(b, '\n'))
		return err
	}
}
