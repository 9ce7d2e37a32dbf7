// kafkago-cli: segmentio/kafka-go 0.2 (Debian's golang-github-segmentio-kafka-go-dev) against a
// broker, for compat-tests/test_kafka_go.py. One JSON line per step on stdout:
// {"step": ..., "error": null | "message", "result": ...}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

type line struct {
	Step   string      `json:"step"`
	Error  *string     `json:"error"`
	Result interface{} `json:"result"`
}

func emit(step string, result interface{}, err error) {
	out := line{Step: step, Result: result}
	if err != nil {
		message := err.Error()
		out.Error = &message
	}
	encoded, _ := json.Marshal(out)
	fmt.Println(string(encoded))
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kafkago-cli BROKER TOPIC")
		os.Exit(2)
	}
	broker, topic := os.Args[1], os.Args[2]
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		emit("dial", nil, err)
		os.Exit(1)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))

	config := kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "3600000"}}}
	emit("createTopics", nil, conn.CreateTopics(config))
	emit("createTopicsAgain", nil, conn.CreateTopics(config)) // kafka-go takes TOPIC_ALREADY_EXISTS as done
	emit("createInvalidTopic", nil, conn.CreateTopics(kafka.TopicConfig{Topic: "bad/name", NumPartitions: 1,
		ReplicationFactor: 1}))

	partitions, err := conn.ReadPartitions(topic)
	ids := []int{}
	for _, p := range partitions {
		ids = append(ids, p.ID)
	}
	emit("readPartitions", ids, err)

	leader, err := kafka.DialLeader(context.Background(), "tcp", broker, topic, 0)
	if err != nil {
		emit("dialLeader", nil, err)
		os.Exit(1)
	}
	leader.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = leader.WriteMessages(kafka.Message{Value: []byte("one")}, kafka.Message{Value: []byte("two")})
	emit("writeMessages", nil, err)
	batch := leader.ReadBatch(1, 1<<20)
	values := []string{}
	for {
		message, err := batch.ReadMessage()
		if err != nil {
			break
		}
		values = append(values, string(message.Value))
	}
	emit("readBatch", values, batch.Close())
	leader.Close()

	emit("deleteTopics", nil, conn.DeleteTopics(topic))
	emit("deleteTopicsAgain", nil, conn.DeleteTopics(topic))
}
