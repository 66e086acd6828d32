// golabels: a Go program whose CPU samples carry pprof labels, as TiDB's Top SQL does
// (standard library only). Two goroutines burn CPU under pprof.Do with a different
// sql_digest label each (main.scanRows under "aaa", twice as long per round as main.sortRows
// under "bbb"); the CPU profile of -seconds is written to the file named by -o.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"os"
	"runtime/pprof"
	"time"
)

var sink [32]byte

func scanRows(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 2000; i++ {
			sink = sha256.Sum256(sink[:])
		}
	}
}

func sortRows(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 1000; i++ {
			sink = sha256.Sum256(sink[:])
		}
		time.Sleep(time.Millisecond)
	}
}

func main() {
	out := flag.String("o", "cpu.pb.gz", "where the CPU profile goes")
	seconds := flag.Float64("seconds", 1.5, "how long to profile")
	flag.Parse()
	f, err := os.Create(*out)
	if err != nil {
		panic(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		panic(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	go pprof.Do(context.Background(), pprof.Labels("sql_digest", "aaa", "stmt", "select"), func(context.Context) {
		scanRows(stop)
		done <- struct{}{}
	})
	go pprof.Do(context.Background(), pprof.Labels("sql_digest", "bbb", "stmt", "update"), func(context.Context) {
		sortRows(stop)
		done <- struct{}{}
	})
	time.Sleep(time.Duration(*seconds * float64(time.Second)))
	close(stop)
	<-done
	<-done
	pprof.StopCPUProfile()
	f.Close()
}
