// Package topology is the topology algebra of the provisioner: it flattens
// and matches a StorageClass's allowedTopologies, builds CSI CreateVolume
// accessibility requirements for a claim, keeps an index of the segments a
// driver's nodes form, and turns a volume's accessible topology into PV node
// affinity. It is pure: no API clients, only objects handed to it.
//
// A worked example (the zone x rack class of the volume topology design). With driver topology keys
// zone and rack, the allowedTopologies
//
//	allowedTopologies:
//	  - matchLabelExpressions:        # term 1
//	      - {key: zone, values: [z1]}
//	      - {key: rack, values: [r1, r2]}
//	  - matchLabelExpressions:        # term 2
//	      - {key: zone, values: [z2]}
//	      - {key: rack, values: [r1]}
//
// mean (zone=z1 AND rack in {r1,r2}) OR (zone=z2 AND rack=r1): terms are ORed,
// the expressions of a term are ANDed, and the values of one expression are
// ORed. Flatten expands each term into the cartesian product of its values and
// yields exactly three segments: {zone=z1,rack=r1}, {zone=z1,rack=r2} and
// {zone=z2,rack=r1}.
package topology
