import BgtaskProbes
let s = Prober(options: ProbeOptions(root: .fromEnvironment())).snapshot()
print(s.summary)
print(s.json.rendered)
