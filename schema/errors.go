package schema

import (
	"fmt"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// BadValueError says which stored value could not be read and why.
type BadValueError struct {
	Key     string
	Problem string
}

// Error quotes the key and escapes the problem, each cut (textsafe):
// anyone with the group's role can write a megabyte key, and a problem may
// quote the value it found.
func (e *BadValueError) Error() string {
	return fmt.Sprintf("coord: bad value at %s: %s", textsafe.Quote(e.Key), textsafe.Escape(e.Problem))
}
