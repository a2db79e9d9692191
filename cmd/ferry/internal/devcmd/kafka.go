package devcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
)

// KafkaCommand is the hidden subcommand `ferry dev` re-executes its own
// binary with to run the embedded broker as a child process.
const KafkaCommand = "dev-kafka"

// startKafka runs the embedded broker in a child process (the ferry binary
// under KafkaCommand), its data in dataDir/kafka and its output in
// dataDir/kafka.log, and returns it with the address it listens on.
func startKafka(ctx context.Context, l *config.Loader, dataDir string) (*devstack.Process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find the ferry binary to run the broker: %w", err)
	}
	return devstack.StartKafkaProcess(ctx, devstack.KafkaProcessConfig{
		Command: []string{self, KafkaCommand,
			"-addr", l.String("FERRY_DEV_KAFKA_ADDR"),
			"-data-dir", filepath.Join(dataDir, "kafka"),
			"-partitions", strconv.Itoa(l.Int("FERRY_TOPIC_PARTITIONS")),
			"-dispatch-partitions", strconv.Itoa(l.Int("FERRY_DISPATCH_PARTITIONS")),
			"-topic-prefix", l.String("FERRY_TOPIC_PREFIX"),
		},
		LogFile: filepath.Join(dataDir, "kafka.log"),
	})
}

// RunKafka is the broker child's main: it parses the flags startKafka
// passes and serves the broker until ctx ends (SIGTERM from `ferry dev`,
// or the kernel's parent-death signal when `ferry dev` dies).
func RunKafka(ctx context.Context, args []string, out io.Writer) error {
	var (
		cfg    devstack.KafkaConfig
		prefix string
	)
	fs := flag.NewFlagSet("ferry "+KafkaCommand, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Addr, "addr", "", "host:port to listen on")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory of the broker's persisted state")
	fs.IntVar(&cfg.Partitions, "partitions", 0, "partitions of each topic")
	dispatch := fs.Int("dispatch-partitions", 0, "partitions of each dispatch topic (0: -partitions)")
	fs.StringVar(&prefix, "topic-prefix", "", "prefix of Ferry's topics, created at first start")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	topics := schema.Topics{Prefix: prefix}
	cfg.Topics, cfg.TopicPartitions = topics.All(), map[string]int{}
	for _, t := range topics.DispatchTopics() {
		cfg.TopicPartitions[t] = *dispatch
	}
	return devstack.ServeKafka(ctx, cfg)
}
