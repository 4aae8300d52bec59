// memberlist-node: one HashiCorp memberlist member on its LAN defaults
// (DefaultLANConfig, whose ProbeInterval is 1 s), for the side-by-side
// idle-bytes comparison in bench/bytes-side-by-side.sh.
//
// Usage: memberlist-node -name m0 -port 17000 [-join 127.0.0.1:17000] [-key BASE64]
//
// Built offline against Debian's golang-github-hashicorp-memberlist-dev:
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o memberlist-node .
//
// It prints "joined N" once it sees N members (-expect), then runs until
// SIGTERM/SIGINT, when it leaves without broadcasting (a hard stop, so that
// the harness's byte counts are not skewed by departures).
package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

func main() {
	name := flag.String("name", "", "node name")
	port := flag.Int("port", 0, "UDP and TCP port on 127.0.0.1")
	join := flag.String("join", "", "comma-separated addresses to join")
	key := flag.String("key", "", "optional base64 AES key (16/24/32 bytes): encrypt like a secured deployment")
	expect := flag.Int("expect", 0, "print 'joined N' once this many members are alive")
	flag.Parse()
	if *name == "" || *port == 0 {
		fmt.Fprintln(os.Stderr, "need -name and -port")
		os.Exit(2)
	}

	cfg := memberlist.DefaultLANConfig()
	cfg.ProbeInterval = time.Second // the LAN default, stated
	cfg.Name = *name
	cfg.BindAddr = "127.0.0.1"
	cfg.BindPort = *port
	cfg.AdvertiseAddr = "127.0.0.1"
	cfg.AdvertisePort = *port
	cfg.LogOutput = io.Discard
	if *key != "" {
		k, err := base64.StdEncoding.DecodeString(*key)
		if err != nil {
			log.Fatalf("bad -key: %v", err)
		}
		cfg.SecretKey = k
	}

	ml, err := memberlist.Create(cfg)
	if err != nil {
		log.Fatalf("create: %v", err)
	}
	if *join != "" {
		for {
			if _, err := ml.Join(strings.Split(*join, ",")); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if *expect > 0 {
		go func() {
			for ml.NumMembers() < *expect {
				time.Sleep(100 * time.Millisecond)
			}
			fmt.Printf("joined %d\n", ml.NumMembers())
		}()
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = ml.Shutdown()
}
