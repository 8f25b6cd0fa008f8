package recordlock

import "time"

// Timestamp is a wall-anchored instant in Unix nanoseconds. The timestamps of one database are
// strictly increasing across all its Lockers and goroutines, even when the wall clock steps back.
type Timestamp int64

// Time converts t to a time.Time.
func (t Timestamp) Time() time.Time { return time.Unix(0, int64(t)) }
