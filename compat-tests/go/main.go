// sarama-cli drives Sarama (Debian's golang-github-shopify-sarama-dev, 1.22) against a broker
// for compat-tests/test_sarama.py. Each subcommand reads one JSON spec on stdin and prints JSON
// on stdout; the asserts live in the Python tests. Sarama's own log goes to stderr.
//
//	produce  SyncProducer: every message of the spec, one result per message (partition, offset
//	         or error and Kafka error code)
//	consume  one partition consumer (no group) from an offset until count messages arrived or
//	         the timeout passed; the messages, the high watermark and any consumer errors
//	group    a ConsumerGroup member streaming events as JSON lines (setup with claims, every
//	         message, cleanup, errors) until stdin says "stop" or closes; then a clean Close
//	admin    ClusterAdmin: a list of operations, one JSON line per operation
//	client   a Client's metadata view of one partition and GetOffset (ListOffsets) answers
//	commit   a standalone OffsetManager (no group membership) committing given offsets
//
// Built in GOPATH mode (GO111MODULE=off) against /usr/share/gocode; see test_sarama.py.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

// ---- output ------------------------------------------------------------------------------

var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func emit(v interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	if err := out.Encode(v); err != nil {
		log.Fatalf("cannot write output: %v", err)
	}
}

// errorOf describes an error as a message and, when Sarama decoded a Kafka error code, that code.
type errorOf struct {
	Message string `json:"message"`
	Code    *int16 `json:"code"`
}

func describeError(err error) *errorOf {
	if err == nil {
		return nil
	}
	e := &errorOf{Message: err.Error()}
	var kerr sarama.KError
	switch v := err.(type) {
	case sarama.KError:
		kerr = v
	case *sarama.TopicError:
		kerr = v.Err
	case *sarama.TopicPartitionError:
		kerr = v.Err
	case *sarama.ProducerError:
		return describeError(v.Err)
	case *sarama.ConsumerError:
		return describeError(v.Err)
	default:
		return e
	}
	code := int16(kerr)
	e.Code = &code
	return e
}

// ---- shared spec -------------------------------------------------------------------------

type common struct {
	Brokers  []string `json:"brokers"`
	Version  string   `json:"version"`
	ClientID string   `json:"clientId"`
	// TLS with this CA file (PEM), and SASL/PLAIN with this user (Sarama 1.22: SaslHandshake v0, raw tokens)
	TLSCA        string `json:"tlsCa"`
	SASLUser     string `json:"saslUser"`
	SASLPassword string `json:"saslPassword"`
}

func (c common) config() *sarama.Config {
	conf := sarama.NewConfig()
	version, err := sarama.ParseKafkaVersion(c.Version)
	if err != nil {
		log.Fatalf("bad version %q: %v", c.Version, err)
	}
	conf.Version = version
	conf.ClientID = "sarama-compat"
	if c.ClientID != "" {
		conf.ClientID = c.ClientID
	}
	// Generous for a slow, shared machine; failures still surface as errors, never hangs.
	conf.Net.DialTimeout = 10 * time.Second
	conf.Net.ReadTimeout = 30 * time.Second
	conf.Net.WriteTimeout = 30 * time.Second
	conf.Metadata.Retry.Max = 10
	conf.Metadata.Retry.Backoff = 300 * time.Millisecond
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			log.Fatalf("cannot read the CA file %s: %v", c.TLSCA, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		conf.Net.TLS.Enable = true
		conf.Net.TLS.Config = &tls.Config{RootCAs: pool, ServerName: "localhost"}
	}
	if c.SASLUser != "" {
		conf.Net.SASL.Enable = true
		conf.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		conf.Net.SASL.Handshake = true
		conf.Net.SASL.User = c.SASLUser
		conf.Net.SASL.Password = c.SASLPassword
	}
	return conf
}

func readSpec(v interface{}) {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		log.Fatalf("cannot read the spec: %v", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		log.Fatalf("bad spec: %v", err)
	}
}

// ---- records -----------------------------------------------------------------------------

type header struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// message is both what to produce and what was consumed. []byte fields are base64 in JSON and
// null when absent, so a null key or value stays distinguishable from an empty one.
type message struct {
	Topic     string   `json:"topic,omitempty"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       []byte   `json:"key"`
	Value     []byte   `json:"value"`
	Headers   []header `json:"headers"`
	Timestamp int64    `json:"timestamp"` // ms since the epoch; 0 = let Sarama use "now"
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano() / int64(time.Millisecond)
}

func fromConsumer(m *sarama.ConsumerMessage) message {
	headers := []header{}
	for _, h := range m.Headers {
		headers = append(headers, header{Key: h.Key, Value: h.Value})
	}
	return message{
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value,
		Headers: headers, Timestamp: millis(m.Timestamp),
	}
}

// ---- produce -----------------------------------------------------------------------------

type produceSpec struct {
	common
	Topic           string    `json:"topic"`
	Acks            int16     `json:"acks"`
	Compression     string    `json:"compression"`
	Idempotent      bool      `json:"idempotent"`
	MaxMessageBytes int       `json:"maxMessageBytes"`
	OneBatch        bool      `json:"oneBatch"` // all messages in one SendMessages call and one flush
	RetryMax        int       `json:"retryMax"`
	Messages        []message `json:"messages"`
}

// produceResult: Timestamp is the message's after the acknowledgement, which Sarama replaces
// with the broker's LogAppendTime when the Produce response carries one (else as sent, 0 if unset).
type produceResult struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Timestamp int64    `json:"timestamp"`
	Error     *errorOf `json:"error"`
}

var codecs = map[string]sarama.CompressionCodec{
	"": sarama.CompressionNone, "none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
}

func produce() {
	var spec produceSpec
	readSpec(&spec)
	conf := spec.config()
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.RequiredAcks(spec.Acks)
	conf.Producer.Partitioner = sarama.NewManualPartitioner
	conf.Producer.Timeout = 20 * time.Second
	codec, ok := codecs[spec.Compression]
	if !ok {
		log.Fatalf("unknown compression %q", spec.Compression)
	}
	conf.Producer.Compression = codec
	if spec.MaxMessageBytes > 0 {
		conf.Producer.MaxMessageBytes = spec.MaxMessageBytes
	}
	if spec.RetryMax > 0 {
		conf.Producer.Retry.Max = spec.RetryMax
	}
	if spec.Idempotent {
		conf.Producer.Idempotent = true
		conf.Net.MaxOpenRequests = 1
	}
	if spec.OneBatch {
		// Flush once every message is in (the timer only guards against a miscount).
		conf.Producer.Flush.Messages = len(spec.Messages)
		conf.Producer.Flush.Frequency = 5 * time.Second
	}

	producer, err := sarama.NewSyncProducer(spec.Brokers, conf)
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	msgs := make([]*sarama.ProducerMessage, len(spec.Messages))
	for i, m := range spec.Messages {
		pm := &sarama.ProducerMessage{Topic: spec.Topic, Partition: m.Partition}
		if m.Key != nil {
			pm.Key = sarama.ByteEncoder(m.Key)
		}
		if m.Value != nil {
			pm.Value = sarama.ByteEncoder(m.Value)
		}
		for _, h := range m.Headers {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		if m.Timestamp != 0 {
			pm.Timestamp = time.Unix(0, m.Timestamp*int64(time.Millisecond))
		}
		msgs[i] = pm
	}

	results := make([]produceResult, len(msgs))
	if spec.OneBatch {
		failed := map[*sarama.ProducerMessage]error{}
		if err := producer.SendMessages(msgs); err != nil {
			var perrs sarama.ProducerErrors
			if !errors.As(err, &perrs) {
				log.Fatalf("SendMessages: %v", err)
			}
			for _, pe := range perrs {
				failed[pe.Msg] = pe.Err
			}
		}
		for i, pm := range msgs {
			results[i] = produceResult{
				Partition: pm.Partition, Offset: pm.Offset, Timestamp: millis(pm.Timestamp), Error: describeError(failed[pm]),
			}
		}
	} else {
		for i, pm := range msgs {
			partition, offset, err := producer.SendMessage(pm)
			results[i] = produceResult{
				Partition: partition, Offset: offset, Timestamp: millis(pm.Timestamp), Error: describeError(err),
			}
		}
	}
	closeErr := producer.Close()
	emit(map[string]interface{}{"results": results, "closeError": describeError(closeErr)})
}

// ---- consume -----------------------------------------------------------------------------

type consumeSpec struct {
	common
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"` // -2 oldest, -1 newest, else an offset
	Count        int    `json:"count"`
	TimeoutMs    int    `json:"timeoutMs"`
	FetchDefault int32  `json:"fetchDefault"`
}

func consume() {
	var spec consumeSpec
	readSpec(&spec)
	conf := spec.config()
	conf.Consumer.Return.Errors = true
	if spec.FetchDefault > 0 {
		conf.Consumer.Fetch.Default = spec.FetchDefault
	}
	consumer, err := sarama.NewConsumer(spec.Brokers, conf)
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(spec.Topic, spec.Partition, spec.Offset)
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	got := []message{}
	consumerErrors := []*errorOf{}
	deadline := time.After(time.Duration(spec.TimeoutMs) * time.Millisecond)
loop:
	for len(got) < spec.Count {
		select {
		case m := <-pc.Messages():
			got = append(got, fromConsumer(m))
		case e := <-pc.Errors():
			consumerErrors = append(consumerErrors, describeError(e))
		case <-deadline:
			break loop
		}
	}
	hwm := pc.HighWaterMarkOffset()
	pc.Close()
	emit(map[string]interface{}{"messages": got, "highWaterMark": hwm, "errors": consumerErrors})
}

// ---- group -------------------------------------------------------------------------------

type groupSpec struct {
	common
	Group              string   `json:"group"`
	Topics             []string `json:"topics"`
	Initial            int64    `json:"initial"` // -2 oldest, -1 newest
	SessionTimeoutMs   int      `json:"sessionTimeoutMs"`
	HeartbeatMs        int      `json:"heartbeatMs"`
	RebalanceTimeoutMs int      `json:"rebalanceTimeoutMs"`
	CommitIntervalMs   int      `json:"commitIntervalMs"`
	RetentionMs        int      `json:"retentionMs"` // > 0: OffsetCommit v2 with a retention time
}

type handler struct{}

func (handler) Setup(s sarama.ConsumerGroupSession) error {
	claims := map[string][]int32{}
	for topic, partitions := range s.Claims() {
		sorted := append([]int32{}, partitions...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		claims[topic] = sorted
	}
	emit(map[string]interface{}{
		"event": "setup", "memberId": s.MemberID(), "generation": s.GenerationID(), "claims": claims,
	})
	return nil
}

func (handler) Cleanup(s sarama.ConsumerGroupSession) error {
	emit(map[string]interface{}{"event": "cleanup", "generation": s.GenerationID()})
	return nil
}

func (handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	emit(map[string]interface{}{
		"event": "claim", "generation": s.GenerationID(), "topic": claim.Topic(), "partition": claim.Partition(),
		"initialOffset": claim.InitialOffset(),
	})
	for m := range claim.Messages() {
		emit(map[string]interface{}{"event": "message", "generation": s.GenerationID(), "message": fromConsumer(m)})
		s.MarkMessage(m, "")
	}
	return nil
}

func group() {
	// The spec is the first line of stdin; later lines are commands ("stop").
	stdin := bufio.NewReader(os.Stdin)
	line, err := stdin.ReadString('\n')
	if err != nil && line == "" {
		log.Fatalf("no spec on stdin: %v", err)
	}
	var spec groupSpec
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		log.Fatalf("bad spec: %v", err)
	}
	conf := spec.config()
	conf.Consumer.Return.Errors = true
	conf.Consumer.Offsets.Initial = spec.Initial
	if spec.SessionTimeoutMs > 0 {
		conf.Consumer.Group.Session.Timeout = time.Duration(spec.SessionTimeoutMs) * time.Millisecond
	}
	if spec.HeartbeatMs > 0 {
		conf.Consumer.Group.Heartbeat.Interval = time.Duration(spec.HeartbeatMs) * time.Millisecond
	}
	if spec.RebalanceTimeoutMs > 0 {
		conf.Consumer.Group.Rebalance.Timeout = time.Duration(spec.RebalanceTimeoutMs) * time.Millisecond
	}
	if spec.CommitIntervalMs > 0 {
		conf.Consumer.Offsets.CommitInterval = time.Duration(spec.CommitIntervalMs) * time.Millisecond
	}
	if spec.RetentionMs > 0 {
		conf.Consumer.Offsets.Retention = time.Duration(spec.RetentionMs) * time.Millisecond
	}
	cg, err := sarama.NewConsumerGroup(spec.Brokers, spec.Group, conf)
	if err != nil {
		emit(map[string]interface{}{"event": "fatal", "error": describeError(err)})
		os.Exit(1)
	}
	go func() {
		for e := range cg.Errors() {
			emit(map[string]interface{}{"event": "error", "error": describeError(e)})
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			cmd, err := stdin.ReadString('\n')
			if err != nil || strings.TrimSpace(cmd) == "stop" {
				cancel()
				return
			}
		}
	}()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			err := cg.Consume(ctx, spec.Topics, handler{})
			if err != nil {
				emit(map[string]interface{}{"event": "consumeError", "error": describeError(err)})
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}()
	<-ctx.Done()
	<-done
	err = cg.Close()
	emit(map[string]interface{}{"event": "closed", "error": describeError(err)})
}

// ---- admin -------------------------------------------------------------------------------

type adminOp struct {
	Op                string             `json:"op"`
	Topic             string             `json:"topic"`
	Topics            []string           `json:"topics"`
	Partitions        int32              `json:"partitions"`
	ReplicationFactor int16              `json:"replicationFactor"`
	Configs           map[string]*string `json:"configs"`
	ValidateOnly      bool               `json:"validateOnly"`
	ResourceType      string             `json:"resourceType"`
	Name              string             `json:"name"`
	ConfigNames       []string           `json:"configNames"`
	Groups            []string           `json:"groups"`
	Group             string             `json:"group"`
	TopicPartitions   map[string][]int32 `json:"topicPartitions"`
	Offsets           map[string]int64   `json:"offsets"`
}

type adminSpec struct {
	common
	Ops []adminOp `json:"ops"`
}

// Kafka's ConfigResource.Type ids. Sarama 1.22's BrokerResource constant is 5, an id Kafka does
// not know (its BROKER is 4), so "broker" is spelled out and "saramaBroker" is Sarama's constant.
var resourceTypes = map[string]sarama.ConfigResourceType{
	"topic": sarama.TopicResource, "broker": sarama.ConfigResourceType(4), "saramaBroker": sarama.BrokerResource,
}

func runAdminOp(admin sarama.ClusterAdmin, op adminOp) (interface{}, error) {
	switch op.Op {
	case "createTopic":
		return nil, admin.CreateTopic(op.Topic, &sarama.TopicDetail{
			NumPartitions: op.Partitions, ReplicationFactor: op.ReplicationFactor, ConfigEntries: op.Configs,
		}, op.ValidateOnly)
	case "listTopics":
		topics, err := admin.ListTopics()
		if err != nil {
			return nil, err
		}
		listed := map[string]interface{}{}
		for name, d := range topics {
			listed[name] = map[string]interface{}{
				"numPartitions": d.NumPartitions, "replicationFactor": d.ReplicationFactor,
				"replicaAssignment": d.ReplicaAssignment, "configs": d.ConfigEntries,
			}
		}
		return listed, nil
	case "describeTopics":
		metadata, err := admin.DescribeTopics(op.Topics)
		if err != nil {
			return nil, err
		}
		described := []interface{}{}
		for _, t := range metadata {
			partitions := []interface{}{}
			for _, p := range t.Partitions {
				partitions = append(partitions, map[string]interface{}{
					"id": p.ID, "leader": p.Leader, "replicas": p.Replicas, "isr": p.Isr, "error": int16(p.Err),
				})
			}
			sort.Slice(partitions, func(i, j int) bool {
				return partitions[i].(map[string]interface{})["id"].(int32) < partitions[j].(map[string]interface{})["id"].(int32)
			})
			described = append(described, map[string]interface{}{
				"name": t.Name, "error": int16(t.Err), "internal": t.IsInternal, "partitions": partitions,
			})
		}
		return described, nil
	case "createPartitions":
		return nil, admin.CreatePartitions(op.Topic, op.Partitions, nil, op.ValidateOnly)
	case "describeConfig":
		entries, err := admin.DescribeConfig(sarama.ConfigResource{
			Type: resourceTypes[op.ResourceType], Name: op.Name, ConfigNames: op.ConfigNames,
		})
		if err != nil {
			return nil, err
		}
		described := map[string]interface{}{}
		for _, e := range entries {
			described[e.Name] = map[string]interface{}{
				"value": e.Value, "readOnly": e.ReadOnly, "default": e.Default, "source": int8(e.Source),
				"sensitive": e.Sensitive, "synonyms": len(e.Synonyms),
			}
		}
		return described, nil
	case "alterConfig":
		return nil, admin.AlterConfig(resourceTypes[op.ResourceType], op.Name, op.Configs, op.ValidateOnly)
	case "deleteTopic":
		return nil, admin.DeleteTopic(op.Topic)
	case "deleteRecords":
		offsets := map[int32]int64{}
		for p, o := range op.Offsets {
			var partition int32
			if _, err := fmt.Sscan(p, &partition); err != nil {
				return nil, err
			}
			offsets[partition] = o
		}
		return nil, admin.DeleteRecords(op.Topic, offsets)
	case "listGroups":
		return admin.ListConsumerGroups()
	case "describeGroups":
		groups, err := admin.DescribeConsumerGroups(op.Groups)
		if err != nil {
			return nil, err
		}
		described := []interface{}{}
		for _, g := range groups {
			members := map[string]interface{}{}
			for id, m := range g.Members {
				member := map[string]interface{}{"clientId": m.ClientId, "clientHost": m.ClientHost}
				if assignment, err := m.GetMemberAssignment(); err == nil && assignment != nil {
					member["assignment"] = assignment.Topics
				} else if err != nil {
					member["assignmentError"] = err.Error()
				}
				if metadata, err := m.GetMemberMetadata(); err == nil && metadata != nil {
					member["subscription"] = metadata.Topics
				} else if err != nil {
					member["subscriptionError"] = err.Error()
				}
				members[id] = member
			}
			described = append(described, map[string]interface{}{
				"groupId": g.GroupId, "error": int16(g.Err), "state": g.State, "protocolType": g.ProtocolType,
				"protocol": g.Protocol, "members": members,
			})
		}
		return described, nil
	case "listGroupOffsets":
		response, err := admin.ListConsumerGroupOffsets(op.Group, op.TopicPartitions)
		if err != nil {
			return nil, err
		}
		listed := map[string]map[string]interface{}{}
		for topic, blocks := range response.Blocks {
			listed[topic] = map[string]interface{}{}
			for p, b := range blocks {
				listed[topic][fmt.Sprint(p)] = map[string]interface{}{
					"offset": b.Offset, "metadata": b.Metadata, "error": int16(b.Err),
				}
			}
		}
		return map[string]interface{}{"error": int16(response.Err), "offsets": listed}, nil
	case "describeCluster":
		brokers, controller, err := admin.DescribeCluster()
		if err != nil {
			return nil, err
		}
		listed := []interface{}{}
		for _, b := range brokers {
			listed = append(listed, map[string]interface{}{"id": b.ID(), "addr": b.Addr()})
		}
		return map[string]interface{}{"brokers": listed, "controller": controller}, nil
	}
	return nil, fmt.Errorf("unknown admin op %q", op.Op)
}

func admin() {
	var spec adminSpec
	readSpec(&spec)
	conf := spec.config()
	conf.Admin.Timeout = 20 * time.Second
	admin, err := sarama.NewClusterAdmin(spec.Brokers, conf)
	if err != nil {
		emit(map[string]interface{}{"op": "connect", "error": describeError(err)})
		return
	}
	defer admin.Close()
	for _, op := range spec.Ops {
		result, err := runAdminOp(admin, op)
		emit(map[string]interface{}{"op": op.Op, "result": result, "error": describeError(err)})
	}
}

// ---- client: metadata and ListOffsets -----------------------------------------------------

type clientSpec struct {
	common
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Times     []int64 `json:"times"` // -2 oldest, -1 newest, else a timestamp in ms
}

func client() {
	var spec clientSpec
	readSpec(&spec)
	c, err := sarama.NewClient(spec.Brokers, spec.config())
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	defer c.Close()
	result := map[string]interface{}{}
	record := func(key string, value interface{}, err error) {
		if err != nil {
			value = map[string]interface{}{"error": describeError(err)}
		}
		result[key] = value
	}
	topics, err := c.Topics()
	record("topics", topics, err)
	partitions, err := c.Partitions(spec.Topic)
	record("partitions", partitions, err)
	writable, err := c.WritablePartitions(spec.Topic)
	record("writablePartitions", writable, err)
	if leader, err := c.Leader(spec.Topic, spec.Partition); err == nil {
		result["leader"] = map[string]interface{}{"id": leader.ID(), "addr": leader.Addr()}
	} else {
		record("leader", nil, err)
	}
	replicas, err := c.Replicas(spec.Topic, spec.Partition)
	record("replicas", replicas, err)
	isr, err := c.InSyncReplicas(spec.Topic, spec.Partition)
	record("isr", isr, err)
	if controller, err := c.Controller(); err == nil {
		result["controller"] = controller.ID()
	} else {
		record("controller", nil, err)
	}
	offsets := []interface{}{}
	for _, t := range spec.Times {
		offset, err := c.GetOffset(spec.Topic, spec.Partition, t)
		if err != nil {
			offsets = append(offsets, map[string]interface{}{"error": describeError(err)})
		} else {
			offsets = append(offsets, offset)
		}
	}
	result["offsets"] = offsets
	emit(result)
}

// ---- commit: a standalone offset manager (no group membership) ----------------------------

type commitSpec struct {
	common
	Group    string           `json:"group"`
	Topic    string           `json:"topic"`
	Offsets  map[string]int64 `json:"offsets"` // partition -> offset to commit
	Metadata string           `json:"metadata"`
}

func commit() {
	var spec commitSpec
	readSpec(&spec)
	conf := spec.config()
	conf.Consumer.Return.Errors = true
	c, err := sarama.NewClient(spec.Brokers, conf)
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	defer c.Close()
	om, err := sarama.NewOffsetManagerFromClient(spec.Group, c)
	if err != nil {
		emit(map[string]interface{}{"error": describeError(err)})
		return
	}
	before := map[string]interface{}{}
	var poms []sarama.PartitionOffsetManager
	var mu sync.Mutex
	commitErrors := []*errorOf{}
	var wg sync.WaitGroup
	for p, offset := range spec.Offsets {
		var partition int32
		if _, err := fmt.Sscan(p, &partition); err != nil {
			log.Fatalf("bad partition %q", p)
		}
		pom, err := om.ManagePartition(spec.Topic, partition)
		if err != nil {
			emit(map[string]interface{}{"error": describeError(err)})
			return
		}
		next, metadata := pom.NextOffset()
		before[p] = map[string]interface{}{"offset": next, "metadata": metadata}
		pom.MarkOffset(offset, spec.Metadata)
		poms = append(poms, pom)
		wg.Add(1)
		go func(pom sarama.PartitionOffsetManager) {
			defer wg.Done()
			for e := range pom.Errors() {
				mu.Lock()
				commitErrors = append(commitErrors, describeError(e))
				mu.Unlock()
			}
		}(pom)
	}
	for _, pom := range poms {
		pom.AsyncClose()
	}
	closeErr := om.Close() // flushes the marked offsets
	wg.Wait()
	emit(map[string]interface{}{"before": before, "errors": commitErrors, "closeError": describeError(closeErr)})
}

func main() {
	log.SetOutput(os.Stderr)
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	if len(os.Args) != 2 {
		log.Fatalf("usage: %s produce|consume|group|admin|client|commit < spec.json", os.Args[0])
	}
	switch os.Args[1] {
	case "produce":
		produce()
	case "consume":
		consume()
	case "group":
		group()
	case "admin":
		admin()
	case "client":
		client()
	case "commit":
		commit()
	default:
		log.Fatalf("unknown subcommand %q", os.Args[1])
	}
}
