package browsertest

import (
	"testing"

	"go.uber.org/goleak"
)

// chromedp stops every goroutine it starts once its contexts are cancelled and the browser has
// exited (chromedp.Cancel waits for both), so no goroutine needs to be ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
