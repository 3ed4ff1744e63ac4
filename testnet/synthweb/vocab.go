package synthweb

// vocabulary is the word stock of the synthetic web: common English words
// so that stemming, stop-word removal and keyword ranking see real text.
// Words are drawn with a Zipf distribution, as in natural language.
var vocabulary = []string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
	"he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
	"were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
	"will", "would", "who", "so", "no", "she", "other", "its", "may", "these", "about", "into", "than",
	"network", "server", "crawler", "search", "engine", "index", "keyword", "document", "page", "link",
	"river", "mountain", "valley", "forest", "garden", "harbour", "island", "village", "market", "bridge",
	"history", "science", "music", "painting", "theatre", "library", "museum", "school", "university",
	"student", "teacher", "lecture", "research", "experiment", "measurement", "latency", "distance",
	"weather", "climate", "rainfall", "summer", "winter", "autumn", "spring", "morning", "evening",
	"kitchen", "recipe", "bread", "cheese", "olive", "tomato", "lemon", "honey", "coffee", "tea",
	"football", "tennis", "cycling", "swimming", "running", "marathon", "stadium", "championship",
	"computer", "software", "hardware", "protocol", "address", "routing", "packet", "bandwidth",
	"database", "storage", "memory", "processor", "algorithm", "compression", "encryption", "signature",
	"election", "parliament", "minister", "council", "policy", "budget", "economy", "industry",
	"railway", "station", "airport", "harbor", "highway", "traffic", "journey", "holiday", "hotel",
	"doctor", "hospital", "medicine", "health", "patient", "vaccine", "nutrition", "exercise",
	"animal", "bird", "horse", "dolphin", "butterfly", "elephant", "tiger", "wolf", "eagle", "salmon",
	"planet", "star", "galaxy", "telescope", "satellite", "rocket", "orbit", "gravity", "comet",
	"novel", "poem", "author", "chapter", "story", "language", "grammar", "dictionary", "translation",
	"castle", "cathedral", "temple", "palace", "monument", "statue", "fountain", "square", "street",
	"company", "customer", "product", "service", "contract", "invoice", "payment", "account", "bank",
	"energy", "solar", "wind", "battery", "electric", "engine", "turbine", "carbon", "emission",
	"family", "children", "friend", "neighbour", "wedding", "birthday", "festival", "celebration",
	"ocean", "coast", "beach", "wave", "tide", "storm", "lighthouse", "sailor", "fisherman", "boat",
	"photograph", "camera", "film", "cinema", "director", "actor", "audience", "festival", "award",
	"build", "write", "read", "travel", "discover", "measure", "compare", "describe", "explain",
	"improve", "collect", "publish", "deliver", "protect", "observe", "design", "develop", "support",
	"quickly", "carefully", "often", "rarely", "together", "already", "always", "never", "perhaps",
	"ancient", "modern", "quiet", "famous", "beautiful", "important", "distant", "nearby", "local",
	"green", "blue", "golden", "silver", "bright", "dark", "warm", "cold", "fresh", "heavy", "light",
}
