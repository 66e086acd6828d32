// pprofserver: a tiny Go program for the pprof reader's end-to-end tests (standard library only).
//
// It burns CPU in two recognisable functions on two goroutines, parks a known number of
// goroutines in a third, and serves net/http/pprof on 127.0.0.1 at a port the kernel picks,
// printed as the first line of stdout. It runs until killed, or until its stdin closes (so a
// test that dies does not leave it behind).
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
)

var sink [32]byte

//go:noinline
func hashLoop() {
	buf := make([]byte, 4096)
	for {
		for i := 0; i < 64; i++ {
			sink = sha256.Sum256(buf)
			buf[0] = sink[0]
		}
	}
}

//go:noinline
func countPrimes(limit int) int {
	n := 0
	for i := 2; i < limit; i++ {
		prime := true
		for j := 2; j*j <= i; j++ {
			if i%j == 0 {
				prime = false
				break
			}
		}
		if prime {
			n++
		}
	}
	return n
}

func primesLoop() {
	for {
		if countPrimes(200000) == 0 {
			fmt.Println("no primes")
		}
	}
}

//go:noinline
func parkForever(ch chan struct{}) {
	<-ch
}

func main() {
	parked := flag.Int("parked", 12, "goroutines parked in parkForever")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	never := make(chan struct{})
	for i := 0; i < *parked; i++ {
		go parkForever(never)
	}
	go hashLoop()
	go primesLoop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = http.Serve(ln, nil)
}
