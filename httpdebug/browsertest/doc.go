// Package browsertest tests the page of package httpdebug in headless Chromium. It is a module
// of its own, so that the browser driver (chromedp) is no dependency of the core module. It
// needs a Chromium binary on the PATH: Debian's chromium package, which `make deps` installs.
package browsertest
