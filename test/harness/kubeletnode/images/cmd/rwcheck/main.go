// Command rwcheck writes a text to a file, syncs it, reads it back and
// prints what it read, on stdout and in its termination message
// (/dev/termination-log). It exits 1 when the text read differs. With
// -stay it then waits for SIGTERM, as a long-running pod's container. With
// -keep it writes only when the file does not exist yet: a pod that finds
// the data of an earlier pod reads that back.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	file := flag.String("file", "/tmp/rwcheck", "File to write and read back.")
	text := flag.String("text", "hello from a real node", "Text to write.")
	stay := flag.Bool("stay", false, "Wait for SIGTERM after the check.")
	keep := flag.Bool("keep", false, "When the file exists, read it and write nothing.")
	flag.Parse()
	var read string
	var err error
	if old, rerr := os.ReadFile(*file); *keep && rerr == nil {
		read = string(old)
	} else {
		read, err = check(*file, *text)
	}
	msg := "read back: " + read
	if err != nil {
		msg = "error: " + err.Error()
	}
	fmt.Println(msg)
	_ = os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
	if err != nil {
		os.Exit(1)
	}
	if *stay {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
	}
}

func check(file, text string) (string, error) {
	f, err := os.Create(file)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if string(data) != text {
		return string(data), fmt.Errorf("wrote %q, read %q", text, data)
	}
	return string(data), nil
}
