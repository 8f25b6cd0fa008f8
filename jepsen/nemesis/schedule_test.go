package nemesis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/nemesis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ciConfig = nemesis.Config{Duration: 60 * time.Second, Nodes: 3, TTL: 2 * time.Second,
	Warmup: 3 * time.Second, Settle: 3 * time.Second}

func TestScheduleIsDeterministic(t *testing.T) {
	a := nemesis.Schedule(7, ciConfig)
	require.Equal(t, a, nemesis.Schedule(7, ciConfig), "the same seed gave another schedule")
	assert.NotEqual(t, a, nemesis.Schedule(8, ciConfig), "two seeds gave the same schedule")
}

// Every seed's 60 s schedule holds every kind and three long pauses, one fault at a time, inside
// the run, with long pauses and partitions longer than the TTL and short pauses shorter.
func TestScheduleCoversEveryKind(t *testing.T) {
	for seed := uint64(1); seed <= 1000; seed++ {
		faults := nemesis.Schedule(seed, ciConfig)
		kinds := map[nemesis.Kind]int{}
		end := ciConfig.Warmup
		for _, f := range faults {
			kinds[f.Kind]++
			require.GreaterOrEqual(t, f.At, end, "seed %d: %v starts before the last fault ended", seed, f)
			end = f.At + f.For
			require.LessOrEqual(t, end, ciConfig.Duration-ciConfig.Settle, "seed %d: %v ends too late", seed, f)
			require.Less(t, f.Node, ciConfig.Nodes)
			switch f.Kind {
			case nemesis.LongPause, nemesis.Partition:
				require.Greater(t, f.For, ciConfig.TTL, "seed %d: %v", seed, f)
			case nemesis.Pause:
				require.Less(t, f.For, ciConfig.TTL, "seed %d: %v", seed, f)
			case nemesis.Delay:
				require.Positive(t, f.Latency, "seed %d: %v", seed, f)
			}
		}
		for _, k := range nemesis.Kinds {
			require.Positive(t, kinds[k], "seed %d: no %s in %v", seed, k, faults)
		}
		require.GreaterOrEqual(t, kinds[nemesis.LongPause], 3, "seed %d: %v", seed, faults)
	}
}
