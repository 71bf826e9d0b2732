# signal-make.sh PID SIGNAL: TestMakeRunStops runs it inside `make run`'s
# recipe, as a command substitution in ARGS, so that make (PID, the recipe
# shell's $PPID) gets SIGNAL after it started the recipe and before bin/run
# runs. It returns once make handles the signal (make's disposition of it is
# no longer "caught", /proc/PID/status SigCgt), within 10 s, and prints
# nothing on stdout, so bin/run gets no argument from it.
pid=$1 sig=$2
num=$(kill -l "$sig") || exit 1
kill -s "$sig" "$pid" || exit 1
echo "signal-make.sh: sent SIG$sig to make" >&2
for _ in $(seq 1000); do
	cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status") || exit 0
	((((0x$cgt >> (num - 1)) & 1) == 0)) && exit 0
	sleep 0.01
done
