package keyshare.peers;

import java.util.HashMap;
import java.util.Map;

/** --name value flags, every one required unless it has a default. */
public final class Flags {
    private final Map<String, String> m = new HashMap<>();

    public Flags(String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("want --name value, got " + args[i]);
            }
            m.put(args[i].substring(2), args[++i]);
        }
    }

    public String get(String name) {
        String v = m.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    public String get(String name, String def) {
        return m.getOrDefault(name, def);
    }

    public int integer(String name, int def) {
        return Integer.parseInt(get(name, Integer.toString(def)));
    }
}
