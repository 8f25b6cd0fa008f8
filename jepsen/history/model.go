package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// State is one key's register in the model: the value of the last write applied and the
// highest fencing token of the writes applied.
type State struct {
	Value int64
	Token uint64
}

// Model is porcupine's model of one register per key under lock → read → write → release
// operations with fenced writes. An OK operation read the value the register held and wrote its
// ID with a token no lower than any applied before it, atomically. An Unknown one either did
// that or had no effect. Fail operations have no effect and are left out of the check.
var Model = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var keys []string
		for _, o := range history {
			k := o.Input.(Op).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() []any { return []any{State{}} },
	Step: func(state, input, _ any) []any {
		s, op := state.(State), input.(Op)
		applied := op.Read && op.Value == s.Value && op.Token >= s.Token
		switch {
		case op.Outcome == OK && applied:
			return []any{State{Value: op.ID, Token: op.Token}}
		case op.Outcome == Unknown && applied:
			return []any{s, State{Value: op.ID, Token: op.Token}}
		case op.Outcome == Unknown:
			return []any{s}
		default:
			return nil
		}
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(Op)
		return fmt.Sprintf("%s: read %d, write %d (token %d): %s", op.Key, op.Value, op.ID, op.Token, op.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(State)
		return fmt.Sprintf("%d (token %d)", s.Value, s.Token)
	},
}).ToModel()
