package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestDlqAndDescribeKafkaAuth runs `orderly dlq list`, `dlq replay` and
// `group describe` against kfake clusters that demand SASL (PLAIN over
// TLS with a private CA, SCRAM-SHA-256, SCRAM-SHA-512), with the same
// --tls-* and --sasl-* flags as consume: the dead letter is listed and
// replayed, and describe reads the group's committed offset. A wrong
// password fails each command with an error naming --brokers and
// --sasl-user. Without these flags the commands could not reach a
// secured cluster at all.
func TestDlqAndDescribeKafkaAuth(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	for _, tt := range secureAuths {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, kopts := tt.start(t, ca, 1, "secure-dlq", "replayed", "secure")
			addr := c.ListenAddrs()[0]
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Kafka 3.0's request versions: OffsetCommit v10 names topics by ID.
			cl, err := kgo.NewClient(append(kopts, kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_0_0()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			dead := dlqCases(time.Now())[0]
			r := dead.dead()
			rec := &kgo.Record{Topic: "secure-dlq", Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
			}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			commitOffset(ctx, t, cl, "ledger", "secure", 0, 7)

			auth := func(password string) []string {
				a := []string{"--brokers", addr, "--sasl-mechanism", tt.mechanism, "--sasl-user", "alice", "--sasl-password", password}
				if tt.tls {
					a = append(a, "--tls-ca", ca.file)
				}
				return a
			}
			out, stderr, err := runCmd2(ctx, slices.Concat([]string{"dlq", "list", "--topic", "secure-dlq", "--json"}, auth("s3cret"))...)
			if err != nil {
				t.Fatalf("dlq list: %v\nstderr:\n%s", err, stderr)
			}
			if got := jsonLines[entryJSON](t, out); len(got) != 1 || got[0].Offset != dead.info.Offset || got[0].Reason != dead.info.Reason {
				t.Errorf("dlq list: got %+v, want the one dead letter (origin offset %d, %s)", got, dead.info.Offset, dead.info.Reason)
			}
			out, stderr, err = runCmd2(ctx, slices.Concat([]string{"dlq", "replay", "--topic", "secure-dlq", "--to", "replayed"}, auth("s3cret"))...)
			if err != nil || !strings.Contains(out, "replayed 1 of 1 selected dead letter") {
				t.Fatalf("dlq replay: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
			}
			if hw := highWatermark(ctx, t, cl, "replayed"); hw != 1 {
				t.Errorf("topic replayed: high watermark %d after the replay, want 1", hw)
			}
			out, stderr, err = runCmd2(ctx, slices.Concat([]string{"group", "describe", "--group", "ledger", "--json"}, auth("s3cret"))...)
			if err != nil {
				t.Fatalf("group describe: %v\nstderr:\n%s", err, stderr)
			}
			var v groupView
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("group describe --json: %v\n%s", err, out)
			}
			if len(v.Parts) != 1 || v.Parts[0].Committed == nil || *v.Parts[0].Committed != 7 {
				t.Errorf("group describe: got partitions %+v, want secure/0 committed at 7", v.Parts)
			}

			for _, cmd := range [][]string{{"dlq", "list", "--topic", "secure-dlq"}, {"group", "describe", "--group", "ledger"}} {
				short, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, _, err := runCmd2(short, slices.Concat(cmd, auth("guess"))...)
				cancel()
				if want := `(or they refused --sasl-user "alice", --sasl-mechanism ` + tt.mechanism + ")"; err == nil ||
					!strings.HasPrefix(err.Error(), "connect to --brokers "+addr+": ") || !strings.HasSuffix(err.Error(), want) {
					t.Errorf("%s with a wrong password: got error %v, want one naming --brokers %s and ending %q", strings.Join(cmd, " "), err, addr, want)
				}
			}
		})
	}
}

// commitOffset commits offset for group on topic/partition, as a client
// outside the group does (generation -1).
func commitOffset(ctx context.Context, t *testing.T, cl *kgo.Client, group, topic string, partition int32, offset int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("commit %s/%d for %s: error code %d", topic, partition, group, rp.ErrorCode)
			}
		}
	}
}

// highWatermark is partition 0's high watermark of topic.
func highWatermark(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("list offsets of %s: %+v", topic, resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// TestDlqLocalIgnoresKafkaEnv: ORDERLY_BROKERS and ORDERLY_SASL_PASSWORD
// in the environment, as the README advises for consume, do not stop a dlq
// command that reads a local store and dials no broker. The check of the
// Kafka flags refused it: --sasl-password needs --sasl-mechanism.
func TestDlqLocalIgnoresKafkaEnv(t *testing.T) {
	f := newDlqFixture(t)
	lookup := func(k string) (string, bool) {
		switch k {
		case "ORDERLY_SASL_PASSWORD":
			return "s3cret", true
		case "ORDERLY_BROKERS":
			return f.addr, true
		}
		return "", false
	}
	var out, stderr strings.Builder
	err := run(context.Background(), []string{"dlq", "list", "--data", f.data, "--json"}, env{stdout: &out, stderr: &stderr, lookup: lookup})
	if err != nil {
		t.Fatalf("dlq list --data with ORDERLY_SASL_PASSWORD set: %v\n%s", err, stderr.String())
	}
	if got := jsonLines[entryJSON](t, out.String()); len(got) != len(f.cases) {
		t.Errorf("dlq list --data: got %d dead letters, want %d", len(got), len(f.cases))
	}
}
