package safety

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/anishathalye/porcupine"
)

// Saved is a history kept to be checked again: one the checker did not
// finish in its time, checked later with more (the recheck command).
type Saved struct {
	Seed    int64
	Bounds  Bounds
	History []porcupine.Operation
}

// savedOp is an operation as a file holds it: its interval is its Op's.
type savedOp struct {
	Client int
	Op     Op
	Result Result
}

// Save writes seed's history h, checked with bounds b, to path.
func Save(path string, seed int64, b Bounds, h []porcupine.Operation) error {
	ops := make([]savedOp, len(h))
	for i, op := range h {
		ops[i] = savedOp{op.ClientId, op.Input.(Op), op.Output.(Result)}
	}
	data, err := json.Marshal(struct {
		Seed   int64
		Bounds Bounds
		Ops    []savedOp
	}{seed, b, ops})
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// Load reads a history Save wrote.
func Load(path string) (Saved, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Saved{}, err
	}
	var f struct {
		Seed   int64
		Bounds Bounds
		Ops    []savedOp
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return Saved{}, fmt.Errorf("%s: %w", path, err)
	}
	s := Saved{Seed: f.Seed, Bounds: f.Bounds, History: make([]porcupine.Operation, len(f.Ops))}
	for i, op := range f.Ops {
		s.History[i] = porcupine.Operation{ClientId: op.Client, Input: op.Op, Call: int64(op.Op.Call), Output: op.Result, Return: int64(op.Op.Return)}
	}
	return s, nil
}
